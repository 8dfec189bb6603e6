"""`verify --source` over several input files names each source row by its file and its row
there (stranger trial, end of stop 27: `source row 3` was m2.parquet row 0). Every message that
compares with the source is held to that: tokens, loss mask, side values, row lengths; the
first file has a row `--on-empty skip` drops, so the cache row, the global row and the file's
row all differ. Side values print once, as their own dtype (float32: -0.1, not
-0.10000000149011612)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from packtool.align import Alignment
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig
from packtool.verification.run import source_store, verify

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CFG = TokenizeConfig(shape="tokens", side_columns=("lp",), on_empty="skip")


def _rows(n, seed):
    rng = np.random.default_rng(seed)
    ids = [rng.integers(1, 900, int(m)).tolist() for m in rng.integers(4, 30, n)]
    return {"input_ids": ids, "loss_mask": [[0] + [1] * (len(r) - 1) for r in ids],
            "lp": [rng.standard_normal(len(r)).astype(np.float32).tolist() for r in ids]}


def _write(path, cols):
    pq.write_table(pa.table({"input_ids": pa.array(cols["input_ids"], pa.list_(pa.int32())),
                             "loss_mask": pa.array(cols["loss_mask"], pa.list_(pa.uint8())),
                             "lp": pa.array(cols["lp"], pa.list_(pa.float32()))}), path)
    return path


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    d = tmp_path_factory.mktemp("srcfiles")
    m1, m2 = _rows(3, 1), _rows(4, 2)
    for k in m1:  # row 1 of m1 is empty: skipped, so m2 row R is cache row 2+R, global row 3+R
        m1[k][1] = []
    f1, f2 = _write(str(d / "m1.parquet"), m1), _write(str(d / "m2.parquet"), m2)
    out = str(d / "out")
    pack([f1, f2], Alignment(capacity=64), PackingConfig("bfd"), CFG, output=out, cache_dir=str(d / "cache"))
    return d, f1, m2, out


def _changed(d, m2, case):
    m = {k: [list(r) for r in v] for k, v in m2.items()}
    if case == "source_tokens":
        m["input_ids"][2][3] += 1
    elif case == "source_loss_mask":
        m["loss_mask"][2][3] = 0
    elif case == "source_side":
        m["lp"][2][3] = 0.1
    elif case == "source_length":
        for k, v in (("input_ids", 7), ("loss_mask", 1), ("lp", 0.5)):
            m[k][2].append(v)
    return _write(str(d / f"m2-{case}.parquet"), m)


@pytest.mark.parametrize("case", ["source_tokens", "source_loss_mask", "source_side", "source_length"])
def test_each_source_message_names_the_file_and_its_row(packed, tmp_path, case):
    d, f1, m2, out = packed
    f2 = _changed(d, m2, case)
    src, _ = source_store([f1, f2], CFG, cache_dir=str(tmp_path / "c"))
    r = verify(out, source_dir=src, workers=1)
    ps = [p for p in r.problems if p.check == case]
    assert not r.ok and ps, (r.counts, r.problems)
    for p in ps:
        assert f"source {f2} row 2, source_index 4" in p.message, p.message
        assert (p.source_file, p.source_row) == (f2, 2), p
        assert "\n" not in p.message
    (j,) = [p for p in json.loads(json.dumps(r.to_dict(), default=str))["problems"] if p["check"] == case][:1]
    assert (j["source_file"], j["source_row"]) == (f2, 2)
    if case == "source_side":  # the float32 0.1 as 0.1, in JSON as on the terminal
        assert j["expected"] == 0.1 and "0.10000000149011612" not in j["message"], j


def test_the_terminal_line_says_a_float32_once_as_float32(packed, tmp_path):
    d, f1, m2, out = packed
    f2 = _changed(d, m2, "source_side")
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("PACKTOOL_DEBUG", None)
    cmd = [sys.executable, "-m", "packtool", "verify", out, "--source", f1, f2, "--cache-dir",
           str(tmp_path / "c"), "-q", "--workers", "1"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    (line,) = [ln for ln in r.stdout.splitlines() if "source_side" in ln and "differs" in ln]
    assert line.count("0.1") == 1 and "0.10000000149011612" not in line, line
    assert "expected" not in line, line  # the message says both values: not again
