"""Clean outputs verify under every kind of layout: CP, TP+SP, FP8 tiles, fixed length (fill
segments), singletons, truncation, DP ranks; and the CLI's exit codes and --json."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from slab_support import load_rows, save_rows, write_pack
from typer.testing import CliRunner

from packtool.align import Alignment
from packtool.cli.app import app
from packtool.planning.core import PackingConfig
from packtool.slabs.names import MANIFEST
from packtool.verification.run import verify

CASES = [
    (Alignment(tp=1, cp=1, capacity=256), PackingConfig("ffd", overflow="split")),
    (Alignment(tp=4, cp=2, fp8="blockwise", capacity=4096), PackingConfig("mffd", overflow="singleton")),
    (Alignment(tp=2, cp=2, fp8="mxfp8", capacity=512, fixed_length=512), PackingConfig("bfd", overflow="split", dp=2)),
    (Alignment(tp=2, cp=1, capacity=300, fixed_length=300), PackingConfig("balanced", overflow="truncate")),
    (Alignment(tp=1, cp=4, capacity=256, convention="nemo-rl"), PackingConfig("bfd", overflow="truncate", dp=4)),
]


@pytest.mark.parametrize("align,packing", CASES, ids=lambda x: getattr(x, "describe", lambda: str(x))())
def test_clean_outputs_verify(tmp_path, align, packing):
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 150, 200)
    lengths[[4, 9]] = [900, 5000]
    out, src = write_pack(str(tmp_path), lengths, align, packing, shard_tokens=8192, group_tokens=2048)
    r = verify(out, src, workers=1)
    assert r.ok, r.problems
    man = json.load(open(os.path.join(out, MANIFEST)))
    assert (r.slabs, r.real_tokens, r.physical_tokens) == (
        man["stats"]["slabs"], man["stats"]["real_tokens"], man["stats"]["physical_tokens"])
    if align.fixed_length:
        fill = sum(int((np.asarray(x) < 0).sum()) for s in man["shards"]
                   for x in load_rows(out, s["file"])["source_index"])
        assert fill > 0 or man["stats"]["fill_pad"] == 0


def test_fill_segment_with_real_tokens_is_caught(tmp_path):
    align = Alignment(tp=2, cp=1, capacity=300, fixed_length=300)
    out, _ = write_pack(str(tmp_path), np.arange(20, 120, 7), align, PackingConfig("bfd"))
    a = load_rows(out, "slabs-00000.parquet")
    r0 = next(r for r, s in enumerate(a["source_index"]) if s[-1] < 0)
    a["input_ids"][r0][-1] = 5  # a token inside the fixed-length fill
    save_rows(out, "slabs-00000.parquet", a)
    r = verify(out, workers=1)
    assert set(r.counts) == {"pad_token"}


def test_cli_exit_codes_and_json(tmp_path):
    out, _ = write_pack(str(tmp_path), np.arange(5, 200, 3), Alignment(cp=2, capacity=256),
                        PackingConfig("bfd"))
    runner = CliRunner()
    res = runner.invoke(app, ["verify", out, "--workers", "1"])
    assert res.exit_code == 0, res.output
    assert "OK" in res.output
    res = runner.invoke(app, ["verify", out, "--workers", "1", "--json"])
    d = json.loads(res.output)
    assert res.exit_code == 0 and d["ok"] and d["problems"] == []
    a = load_rows(out, "slabs-00000.parquet")
    a["cu_seqlens"][0][-1] += 2
    save_rows(out, "slabs-00000.parquet", a)
    res = runner.invoke(app, ["verify", out, "--workers", "1", "--json"])
    assert res.exit_code == 1
    d = json.loads(res.output)
    assert not d["ok"] and d["counts"] == {"cu_seqlens": 1}
    p = d["problems"][0]
    assert (p["shard"], p["row"], p["check"]) == ("slabs-00000.parquet", 0, "cu_seqlens")
    res = runner.invoke(app, ["verify", out, "--workers", "1"])
    assert res.exit_code == 1 and "FAILED" in res.output and "cu_seqlens" in res.output
    # each problem line says what its numbers count from, as every packtool error does
    lines = [ln for ln in res.output.splitlines() if ln.startswith("✗")]
    assert lines and all(ln.endswith("(rows count from 0)") or "(rows count from 0" in ln for ln in lines), lines
    assert "slabs-00000.parquet row 0" in lines[0]
    res = runner.invoke(app, ["verify", str(tmp_path / "nope")])
    # a typo, not an interrupted pack; nothing there to check: a bad input (tests/cli/test_missing_inputs.py)
    assert res.exit_code == 2 and "no such folder" in res.output


def test_dp_fields(tmp_path):
    out, _ = write_pack(str(tmp_path), np.arange(5, 400, 3), Alignment(capacity=512),
                        PackingConfig("bfd", dp=2), shard_tokens=1 << 20)
    assert verify(out, workers=1).ok
    a = load_rows(out, "slabs-00000.parquet")
    a["dp_rank"][0] = 1 - a["dp_rank"][0]  # two slabs of one step on the same rank
    save_rows(out, "slabs-00000.parquet", a)
    r = verify(out, workers=1)
    assert set(r.counts) == {"dp"}
    a["dp_rank"][0] = 1 - a["dp_rank"][0]
    a["step"][0], a["step"][2] = a["step"][2], a["step"][0]  # steps out of on-disk order
    a["dp_rank"][0], a["dp_rank"][2] = a["dp_rank"][2], a["dp_rank"][0]
    save_rows(out, "slabs-00000.parquet", a)
    r = verify(out, workers=1)
    assert set(r.counts) == {"dp"} and "on-disk order" in r.problems[0].message
