"""S46A-5 under `--engine ray`: a JSON Lines file read whole in a Ray task holds its later rows to
the shape told from its first rows as the local build does (tests/tokenize/test_late_columns.py
holds the class over every door and kind): the same one-line refusal, naming the row."""
from __future__ import annotations

import json

import pytest

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'packtool[ray]')")

from conftest import GPT2, LOCAL_RAY_GROUP  # noqa: E402

from packtool.engines.ray_engine import _unwrap, tokenized_cache  # noqa: E402
from packtool.errors import PacktoolError  # noqa: E402
from packtool.tokenize.config import TokenizeConfig  # noqa: E402
from packtool.tokenize.pipeline import tokenize_to_cache  # noqa: E402

pytestmark = [pytest.mark.usefixtures("local_ray"), LOCAL_RAY_GROUP]

N = 1500
LATE = {"history": {"instruction": "and now?", "input": "", "output": "done", "history": [["q", "a"]]},
        "input": {"instruction": "and now?", "input": "with this", "output": "done"}}


@pytest.mark.parametrize("late", LATE)
def test_the_ray_build_refuses_a_late_column_as_the_local_build(tmp_path, late):
    p = tmp_path / "rows.jsonl"
    rows = [{"instruction": f"say {i}" + " lorem ipsum" * 6, "output": f"ok {i}",
             **({"input": ""} if late == "history" else {})} for i in range(N)]
    p.write_text("".join(json.dumps(r) + "\n" for r in [*rows, LATE[late]]))
    said = {}
    for engine, build in (("local", tokenize_to_cache), ("ray", tokenized_cache)):
        with pytest.raises(PacktoolError) as e:
            try:
                build([str(p)], TokenizeConfig(tokenizer=GPT2), str(tmp_path / f"cache-{engine}"), progress=False)
            except Exception as x:  # a Ray task's error, as pack_ray hands it out
                raise _unwrap(x) from None
        said[engine] = str(e.value)
    assert said["ray"] == said["local"] and f"row {N}:" in said["local"] and "past the first rows" in said["local"], said
