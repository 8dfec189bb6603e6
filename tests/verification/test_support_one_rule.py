"""One sampler-support rule (S42-1): whatever the scorer (packtool/kernels/support_check.py)
refuses at training time, `pack` refuses at the input row and `verify` at the slab
(packtool/support_rule.py), and nothing else. Candidate ids past the vocabulary (the
manifest's vocab_size; 2^31 without a tokenizer, FORMAT.md's bound on token ids) and a
candidate twice passed pack and verify ("OK") and stopped an RL run at the batch holding them.

The class: every kind of support row x (the rule, the scorer) must agree; the new refusals
through pack (tests/tokenize/test_support_rule_at_pack.py) and verify (here, on an output that
records a vocab_size; tests/verification/test_verify_side_columns.py for the rest); the
finding's example on the command line."""
from __future__ import annotations

import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import GPT2
from side_support import plant_side, side_rows, write_input
from slab_support import read_manifest, resign
from typer.testing import CliRunner

from packtool.support_rule import first_breaks

V = 100
ROWS = {  # name -> (token, row, loss flag, the scorer and the rule refuse it)
    "clean": (5, [5, 6, 7, -1], 1, False),
    "clean_alone": (5, [5, -1, -1, -1], 1, False),
    "clean_top_id": (5, [5, V - 1, -1, -1], 1, False),
    "empty_off_the_loss": (5, [-1, -1, -1, -1], 0, False),
    "empty_on_the_loss": (5, [-1, -1, -1, -1], 1, True),
    "order": (5, [5, -1, 6, -1], 1, True),
    "starts_with_padding": (5, [-1, 5, -1, -1], 1, True),
    "below_minus_one": (5, [5, -7, -1, -1], 1, True),
    "absent": (5, [6, 7, -1, -1], 1, True),
    "token_twice": (5, [5, 5, -1, -1], 1, True),
    "candidate_twice": (5, [5, 7, 7, -1], 1, True),
    "candidate_twice_off_the_loss": (5, [5, 7, 7, -1], 0, True),
    "at_vocab_size": (5, [5, V, -1, -1], 1, True),
    "far_past_vocab": (5, [5, 2**31 - 1, -1, -1], 1, True),
    "token_past_vocab": (V + 3, [V + 3, -1, -1, -1], 1, True),
    "long_row_distinct": (5, [5] + list(range(10, 49)), 1, False),  # past the pairwise compare: sorted
    "long_row_twice": (5, [5] + list(range(10, 48)) + [30], 1, True),
}


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("name", sorted(ROWS))
def test_the_rule_refuses_what_the_scorer_refuses(name, dtype):
    torch = pytest.importorskip("torch")
    from packtool.errors import PacktoolInputError
    from packtool.kernels.support_check import check_support
    token, row, loss, refused = ROWS[name]
    vals = np.asarray([row], dtype)
    first = first_breaks(vals, np.asarray([token]), np.ones(1, bool), np.asarray([loss], np.uint8), V)
    assert bool((first >= 0).any()) == refused, (name, first)
    try:
        check_support(torch.tensor([token]), torch.from_numpy(vals), V, 0, V, torch.tensor([bool(loss)]))
        scorer = False
    except PacktoolInputError:
        scorer = True
    assert scorer == refused, name


def test_without_a_vocabulary_the_bound_is_format_mds():
    vals = np.asarray([[5, 2**31 + 5, -1], [5, 2**31 - 1, -1]], np.int64)
    first = first_breaks(vals, np.asarray([5, 5]), np.ones(2, bool), np.ones(2, np.uint8), None)
    assert first.tolist().count(-1) == len(first) - 1 and 0 in first.tolist()  # the first row only


@pytest.fixture(scope="module")
def with_vocab(tmp_path_factory):
    """Pre-tokenized rows packed with a tokenizer: the manifest records vocab_size 50257."""
    from packtool.align import Alignment
    from packtool.packing import pack
    from packtool.planning.core import PackingConfig
    from packtool.tokenize.config import TokenizeConfig
    root = tmp_path_factory.mktemp("vocab")
    ids, lp, sup = side_rows(n=40, seed=11)
    out = str(root / "packed")
    pack([write_input(str(root / "in.parquet"), ids, lp, sup)], Alignment(cp=2, capacity=256),
         PackingConfig("bfd", overflow="split"),
         TokenizeConfig(shape="tokens", tokenizer=GPT2, side_columns=("lp",), support_columns=("sup",)),
         output=out, cache_dir=str(root / "cache"))
    assert read_manifest(out)["tokenizer"]["vocab_size"] == 50257
    return out


@pytest.mark.parametrize("case,needle", [("support_outside", "candidate id 50257 is outside the vocabulary: ids are "
                                                              "in [0, vocab_size 50257)"),
                                         ("support_repeated", "is in the row more than once")])
def test_verify_refuses_a_slab_the_scorer_would_stop_at(with_vocab, tmp_path, case, needle):
    from packtool.verification.run import verify
    out = str(tmp_path / "p")
    shutil.copytree(with_vocab, out)
    shard = read_manifest(out)["shards"][0]["file"]
    t = pq.read_table(os.path.join(out, shard))
    pq.write_table(plant_side(t, case, vocab=50257), os.path.join(out, shard), compression="zstd")
    resign(out, shard)
    r = verify(out, workers=1)
    assert not r.ok and set(r.counts) == {"side_support"}, r.counts
    msgs = [p.message for p in r.problems]
    assert len(msgs) == 1 and "'sup'" in msgs[0] and needle in msgs[0] and "\n" not in msgs[0], msgs


@pytest.mark.parametrize("case,value,needle", [("big_id", 2**31 - 1, "outside the vocabulary: ids are in [0, "
                                                                     "vocab_size 50257)"),
                                               ("dupcand", 7, "candidate id 7 is in the row more than once")])
def test_the_findings_example_is_refused_at_its_row(tmp_path, case, value, needle):
    """S42-1's commands: pack exit 2, one line naming the file, row, token, column and value;
    no output."""
    from packtool.cli.app import app
    rows = []
    for i in range(4):
        ids = list(range(100 + i * 10, 110 + i * 10))
        sup = [[ids[t], 1, 2, -1] for t in range(10)]
        if i == 2:
            sup[3] = [ids[3], value, 2 if case == "big_id" else value, -1]
        rows.append(dict(input_ids=ids, loss_mask=[1] * 10, old_logprobs=[-0.5] * 10, support=sup))
    src = str(tmp_path / "big.parquet")
    pq.write_table(pa.Table.from_pylist(rows), src)
    before = open(src, "rb").read()
    out = str(tmp_path / "p_big")
    r = CliRunner().invoke(app, ["pack", src, "--side-columns", "old_logprobs", "--support-columns", "support",
                                 "-C", "64", "--cp", "2", "--tokenizer", GPT2, "-o", out, "-q",
                                 "--cache-dir", str(tmp_path / "cache")])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert all(s in lines[0] for s in ("big.parquet", "row 2", "token 3 ", "support", str(value), needle)), lines[0]
    assert not os.path.exists(out) and open(src, "rb").read() == before
