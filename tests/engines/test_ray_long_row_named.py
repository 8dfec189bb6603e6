"""Under `--engine ray` too, a row refused as too long for the memory left (tokenize.long_rows)
is named by its file and row (from 0): the library's pack_ray raises it with .path/.row, and
`pack --engine ray` says it in the error contract's `FILE, row N:` form with path/row in --json
(S36-8's rule, which held only for the local engine's pipeline). The limit is stood in for
inside the Ray tasks that tokenize: `room` reports little left and the probe child says only the
long row ran out (the stand-in travels by value, as ray_faults' does, and is undone after each
block so that the shared local Ray's workers are left as they were)."""
from __future__ import annotations

import json
import sys

import pytest

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'packtool[ray]')")

import ray.cloudpickle  # noqa: E402
from conftest import GPT2, LOCAL_RAY_GROUP, LONG_ROW, long_row_inputs as _inputs  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

import packtool.engines.ray_cache as ray_cache  # noqa: E402
from packtool.cli.app import app  # noqa: E402
from packtool.engines.ray_engine import pack_ray  # noqa: E402
from packtool.tokenize import long_rows  # noqa: E402
from packtool.tokenize.config import TokenizeConfig  # noqa: E402

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import this module

pytestmark = [pytest.mark.usefixtures("local_ray"), LOCAL_RAY_GROUP]

LONG = LONG_ROW


def _tight(real):
    def tokenize_block(batch, job):
        saved = long_rows.room, long_rows._encodes_in_child
        long_rows.room = lambda: (20_000, "the address-space limit (ulimit -v)")
        long_rows._encodes_in_child = lambda tok, text, fast: len(text) < LONG
        try:
            return real(batch, job)
        finally:
            long_rows.room, long_rows._encodes_in_child = saved
    return tokenize_block



# the library x the long row in the first/second file x one/many tokenize batches per block;
# the CLI (no batch-size flag) x the first/second file
CASES = [("library pack_ray", w, b) for w in "ab" for b in (1024, 2)] + [("pack --engine ray", w, 1024) for w in "ab"]


@pytest.mark.parametrize("run, where, batch", CASES, ids=[f"{r}-{w}-{b}" for r, w, b in CASES])
def test_a_row_too_long_for_memory_is_named_by_file_and_row_on_ray(tmp_path, monkeypatch, run, where, batch):
    paths = _inputs(tmp_path, where)
    path = paths[0 if where == "a" else 1]
    monkeypatch.setattr(ray_cache, "tokenize_block", _tight(ray_cache.tokenize_block))
    if run == "library pack_ray":
        with pytest.raises(long_rows.RowTooLongError) as e:
            pack_ray(paths, tokenize=TokenizeConfig(tokenizer=GPT2, batch_size=batch), dry_run=True,
                     cache_dir=str(tmp_path / "c"))
        assert (e.value.path, e.value.row) == (path, 2), (e.value.path, e.value.row, str(e.value))
        assert "Traceback" not in str(e.value) and "attempts" not in str(e.value), str(e.value)  # Ray's retry advice
        return
    r = CliRunner().invoke(app, ["pack", *paths, "--tokenizer", GPT2, "-C", "8192", "--overflow", "split", "--json",
                                 "--no-progress", "--engine", "ray", "-o", str(tmp_path / "out"),
                                 "--cache-dir", str(tmp_path / "c")])
    err = json.loads(r.output.strip().splitlines()[-1])["error"]
    assert (r.exit_code, err["kind"]) == (2, "resources"), r.output
    assert (err["path"], err["row"]) == (path, 2), err
    assert err["message"].startswith(f"{path}, row 2: out of memory") and "(rows count from 0" in err["message"]
    assert "Traceback" not in err["message"] and "attempts" not in err["message"], err["message"]
