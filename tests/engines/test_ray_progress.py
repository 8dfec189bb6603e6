"""The Ray engine shows packtool's own bars (tokenizing by rows, writing by shards) and keeps
Ray Data's bars off."""
from __future__ import annotations

from contextlib import contextmanager

import pytest

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'packtool[ray]')")

from conftest import GPT2, GSM8K, LOCAL_RAY_GROUP  # noqa: E402

import packtool.engines.ray_cache as ray_cache  # noqa: E402
import packtool.engines.ray_write as ray_write  # noqa: E402
from packtool.align import Alignment  # noqa: E402
from packtool.engines.ray_engine import pack_ray  # noqa: E402
from packtool.planning.core import PackingConfig  # noqa: E402
from packtool.tokenize.config import TokenizeConfig  # noqa: E402


pytestmark = [pytest.mark.usefixtures("local_ray"), LOCAL_RAY_GROUP]  # one Ray with tests/conftest.py's other users


def test_ray_pack_shows_packtool_bars_to_their_totals(tmp_path, monkeypatch):
    seen = {}

    @contextmanager
    def fake_bar(label, total, unit, enabled=True):
        seen[label] = {"total": total, "done": 0, "enabled": enabled, "unit": unit}
        yield lambda n: seen[label].__setitem__("done", seen[label]["done"] + n)

    monkeypatch.setattr(ray_cache, "bar", fake_bar)
    monkeypatch.setattr(ray_write, "bar", fake_bar)
    cfg = TokenizeConfig(tokenizer=GPT2, prompt_field="question", response_field="answer")
    res = pack_ray([GSM8K], Alignment(capacity=1024), PackingConfig(seed=1), cfg, output=str(tmp_path / "o"),
                   cache_dir=str(tmp_path / "c"), shard_tokens=4096, progress=True)
    tok, wr = seen["Tokenizing (Ray)"], seen["Writing (Ray)"]
    assert tok == {"total": 200, "done": 200, "enabled": True, "unit": "rows"}
    assert wr["enabled"] and wr["unit"] == "shards" and wr["done"] == wr["total"] == len(res.shards) > 1
    assert ray.data.DataContext.get_current().enable_progress_bars is False
