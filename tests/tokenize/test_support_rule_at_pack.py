"""`pack --support-columns` holds every input row to the support rule (packtool/support_rule.py)
before anything is written, as `verify` holds every slab: a row that breaks it is one line
naming the file, the row, the token and the rule, exit 2, no output, no cache entry. The
misspelt column name is a --side-columns / --support-columns line, not a shape problem."""
from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import GPT2
from typer.testing import CliRunner

from packtool.cli.app import app

runner = CliRunner()
GOOD = [[[5, -1], [6, 9], [7, -1]], [[1, -1], [2, -1], [3, 4]]]
BAD = {  # rule -> (row 1's support, the token it names, the needle[, the flags it needs])
    "order": ([[1, -1], [-1, 2], [3, 4]], 1, "-1 pads the end"),
    "below_minus_one": ([[1, -1], [2, -7], [3, 4]], 1, "-1 pads the end"),
    "absent": ([[1, -1], [2, -1], [8, 4]], 2, "not among its candidates"),
    "twice": ([[1, -1], [2, 2], [3, 4]], 1, "more than once"),
    "empty_on_loss": ([[1, -1], [-1, -1], [3, 4]], 1, "the loss counts this token but its row is empty"),
    # what the scorer refuses, refused at pack too (S42-1): an id past the vocabulary, a candidate twice
    "outside_vocab": ([[1, -1], [2, 50257], [3, 4]], 1, "candidate id 50257 is outside the vocabulary: ids are "
                      "in [0, vocab_size 50257)", ("--tokenizer", GPT2)),
    "outside_2^31": ([[1, -1], [2, 2**31 + 5], [3, 4]], 1, "candidate id 2147483653 is outside [0, 2^31)"),
    "repeated": ([[1, -1, -1], [2, -1, -1], [3, 9, 9]], 2, "candidate id 9 is in the row more than once"),
}


def _write(path, sup, loss_mask=None):
    t = {"input_ids": [[5, 6, 7], [1, 2, 3]], "lp": [[0.0, -1.0, -2.0], [0.0, -0.5, -0.25]], "sup": sup}
    if loss_mask is not None:
        t["loss_mask"] = loss_mask
    pq.write_table(pa.table(t), path)
    return str(path)


def _pack(tmp_path, src, *extra):
    return runner.invoke(app, ["pack", src, "-o", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache"),
                               "-C", "64", "-q", *extra])


@pytest.mark.parametrize("rule", sorted(BAD))
def test_a_row_that_breaks_the_support_rule_is_refused_before_writing(tmp_path, rule):
    sup, token, needle, *flags = BAD[rule]
    src = _write(tmp_path / "in.parquet", [[row + [-1] * (len(sup[-1]) - 2) for row in GOOD[0]], sup])
    r = _pack(tmp_path, src, "--side-columns", "lp", "--support-columns", "sup", *(flags[0] if flags else ()))
    assert r.exit_code == 2, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert all(s in lines[0] for s in ("in.parquet", "row 1", f"token {token} ", "sup", needle)), lines[0]
    assert not os.path.exists(tmp_path / "out")
    assert not [f for _, _, fs in os.walk(tmp_path / "cache") for f in fs if f == "cache.json"]


def test_an_empty_row_on_a_token_the_loss_skips_is_packed(tmp_path):
    sup = [[[-1, -1], [6, 9], [7, -1]], [[1, -1], [-1, -1], [3, 4]]]
    src = _write(tmp_path / "in.parquet", sup, loss_mask=[[0, 1, 1], [0, 0, 1]])
    r = _pack(tmp_path, src, "--support-columns", "sup")
    assert r.exit_code == 0, r.stdout + r.stderr
    assert runner.invoke(app, ["verify", str(tmp_path / "out"), "-q"]).exit_code == 0


@pytest.mark.parametrize("flags,flag", [(["--side-columns", "lp,suport"], "--side-columns"),
                                        (["--side-columns", "lp", "--support-columns", "suport"], "--support-columns")])
def test_a_misspelt_side_column_names_its_flag(tmp_path, flags, flag):
    src = _write(tmp_path / "in.parquet", GOOD)
    r = _pack(tmp_path, src, *flags)
    assert r.exit_code == 2, r.stdout + r.stderr
    line = r.stderr.strip()
    assert "suport not in this file" in line and flag in line and "--shape" not in line, line


def test_a_side_column_named_like_anothers_shifted_copy_is_refused_up_front(tmp_path):
    """shift_NAME is the batch key of NAME shifted like labels: the HF collator refused it at training."""
    src = _write(tmp_path / "in.parquet", GOOD)
    r = _pack(tmp_path, src, "--side-columns", "lp,shift_lp")
    assert r.exit_code == 2 and "'shift_lp' is the name every batch gives 'lp'" in r.stderr, r.stdout + r.stderr
    assert not os.path.exists(tmp_path / "out")
