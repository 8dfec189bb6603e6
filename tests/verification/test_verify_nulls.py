"""verify on a slab with one null, in every column of the slab format: the null is said once
(`schema`, naming shard, row and column) and nothing else. A null scalar (num_tokens, dp_rank,
step, layout_pad...) used to skip its whole record batch, and the skipped rows came back as
follow-on problems (shard_counts, manifest_stats, missing_sequence, slab_index); now only the
checks that read the null value leave its slab out, and the batch's other rows, the slab's
own lists and the whole-output checks are still held (said once in a note). Exit 1
(README.md, exit codes)."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from slab_support import load_rows, read_manifest, save_manifest, save_rows, write_pack
from typer.testing import CliRunner

from packtool.align import Alignment
from packtool.planning.core import PackingConfig
from packtool.slabs.schema import SCHEMA
from packtool.verification.cover import check_dp
from packtool.verification.problems import ProblemLog
from packtool.verification.run import verify

SHARD = "slabs-00000.parquet"
ROW = 2  # inside the first batch (batch_rows=8), with rows before and after it
LENGTHS = np.random.default_rng(5).integers(1, 30, 160) * 8 - 3
PACKS = {  # DP checks in play; and a pack whose singletons enter the coverage counts
    "dp2": (Alignment(cp=2, capacity=256), PackingConfig("bfd", dp=2), LENGTHS),
    "singleton": (Alignment(capacity=128), PackingConfig("mffd", overflow="singleton"),
                  np.concatenate((LENGTHS[:60], [300, 500]))),
}


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    made = {}

    def get(name):
        if name not in made:
            align, packing, lengths = PACKS[name]
            out, _ = write_pack(str(tmp_path_factory.mktemp(name)), lengths, align, packing,
                                shard_tokens=8192, group_tokens=2048)
            assert verify(out, workers=1, batch_rows=8).ok
            made[name] = out
        return made[name]
    return get


def _null(col, row=ROW):
    def edit(c):
        if isinstance(c[col][row], np.ndarray):  # a list column: one entry
            a = c[col][row].astype(object)
            a[0] = None
            c[col][row] = a
        else:
            c[col][row] = None
    return edit


def _damaged(src, tmp_path, *edits, manifest=None):
    out = str(tmp_path / "out")
    shutil.copytree(src, out)
    cols = load_rows(out, SHARD)
    for edit in edits:
        edit(cols)
    save_rows(out, SHARD, cols)
    if manifest:
        m = read_manifest(out)
        manifest(m)
        save_manifest(out, m)
    return out


def _said(r):
    return [(p.check, p.shard, p.row, p.message) for p in r.problems]


@pytest.mark.parametrize("pack", list(PACKS))
@pytest.mark.parametrize("col", SCHEMA.names)
def test_one_null_is_one_problem_line_naming_the_column(clean, tmp_path, col, pack):
    r = verify(_damaged(clean(pack), tmp_path, _null(col)), workers=1, batch_rows=8)
    assert r.counts == {"schema": 1}, _said(r)
    (p,) = r.problems
    assert (p.shard, p.row) == (SHARD, ROW) and repr(col) in p.message, p
    assert sum("null" in n for n in r.notes) == 1, r.notes


@pytest.mark.parametrize("col", ["num_tokens", "dp_rank", "singleton"])
def test_the_exit_code_is_1_and_json_says_the_null(clean, tmp_path, col):
    from packtool.cli.app import app
    out = _damaged(clean("dp2"), tmp_path, _null(col))
    res = CliRunner().invoke(app, ["verify", out, "--workers", "1", "--json"])
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    d = json.loads(res.output)
    assert d["counts"] == {"schema": 1} and repr(col) in d["problems"][0]["message"], d


SCALARS = [f.name for f in SCHEMA if not str(f.type).startswith("list")]


@pytest.mark.parametrize("col", SCALARS)
def test_what_a_null_scalar_leaves_checkable_is_still_checked(clean, tmp_path, col):
    """The slab's other scalar, the batch's other rows and a whole-output figure the null does
    not enter are still held: a damage in each is found beside the null."""
    other = "num_loss_tokens" if col != "num_loss_tokens" else "num_tokens"
    def bump(row, c=other):
        def edit(cols):
            cols[c][row] += 1
        return edit
    edit_stats = lambda m: m["stats"].__setitem__("real_tokens", m["stats"]["real_tokens"] + 5)  # noqa: E731
    r = verify(_damaged(clean("dp2"), tmp_path, _null(col), bump(ROW), bump(ROW + 3), manifest=edit_stats),
               workers=1, batch_rows=8)
    rows = sorted(p.row for p in r.problems if p.check in ("num_loss_tokens", "layout"))
    assert rows == [ROW, ROW + 3], _said(r)
    assert r.counts.get("schema") == 1 and r.counts.get("manifest_stats") == 1, _said(r)
    assert set(r.counts) == {"schema", "manifest_stats", "num_loss_tokens" if other == "num_loss_tokens"
                             else "layout"}, _said(r)


def test_dp_rules_hold_over_the_known_values():
    """check_dp with nulls: a rule fails only where no values in place of the nulls keep it."""
    def run(idx, rank, step, nulls):
        n = len(idx)
        slabs = dict(slab_index=np.array(idx), dp_rank=np.array(rank), step=np.array(step),
                     microbatch=np.zeros(n, np.int64))
        log = ProblemLog()
        check_dp(slabs, 2, log, {k: np.array(v, bool) for k, v in nulls.items()})
        return dict(log.counts)
    ok = ([0, 1, 2, 3], [0, 1, 0, 1], [0, 0, 1, 1])
    assert run(*ok, {"slab_index": [0, 1, 0, 0]}) == {}
    assert run([0, 0, 2, 3], *ok[1:], {"slab_index": [0, 1, 0, 0]}) == {}  # the null can be 1
    assert run([0, 0, 2, 3], *ok[1:], {"slab_index": [0, 0, 1, 0]}) == {"slab_index": 1}  # 0 twice
    assert run([0, 1, 9, 3], *ok[1:], {"slab_index": [1, 0, 0, 0]}) == {"slab_index": 1}  # 9 of 4 slabs
    assert run(ok[0], [0, 0, 0, 1], [0, 1, 2, 3], {"dp_rank": [0, 0, 0, 1]}) == {"dp": 1}  # rank 0 holds 3 of 4
    assert run(ok[0], [0, 1, 0, 0], ok[2], {"dp_rank": [0, 0, 0, 1]}) == {}  # the null can be 1
    assert run(ok[0], [0, 1, 0, 0], [0, 0, 0, 1], {"dp_rank": [0, 0, 0, 1]}) == {"dp": 1}  # (0, 0, 0) twice
    assert run(*ok[:2], [0, 7, 1, 1], {"step": [0, 1, 0, 0]}) == {}  # the null can be 0 or 1
    assert run(*ok[:2], [1, 7, 0, 1], {"step": [0, 1, 0, 0]}) == {"dp": 1}  # step 0 after step 1


# --- side columns: a null (or a length other than T) left the column unchecked for the whole
# record batch, and its NaN count short, which came back as a side_nonfinite line of its own

SIDE_CASES = {"side_null": "lp", "side_null_row": "lp", "side_length": "lp",
              "side_null_support_row": "sup", "side_null_support_value": "sup"}


@pytest.fixture(scope="module")
def side_pack(tmp_path_factory):
    from side_support import side_rows, write_input

    from packtool.packing import pack
    from packtool.tokenize.config import TokenizeConfig
    root = tmp_path_factory.mktemp("side_nulls")
    ids, lp, sup = side_rows(n=80, seed=3)
    for r in range(0, 80, 7):  # NaN log-probs in the input: the manifest's stats.side_nan holds them
        lp[r][0] = np.nan
    out = str(root / "packed")
    pack([write_input(str(root / "in.parquet"), ids, lp, sup)], Alignment(tp=2, cp=2, capacity=256),
         PackingConfig("bfd", overflow="split"),
         TokenizeConfig(shape="tokens", side_columns=("lp",), support_columns=("sup",)), output=out,
         cache_dir=str(root / "cache"))
    assert read_manifest(out)["stats"]["side_nan"]["lp"] > 0
    r = verify(out, workers=1)
    assert r.ok, _said(r)
    return out


def _plant(src, tmp_path, case, second=False):
    """`case` in the first slab with a pad; `second`: a pad of a later slab of the same shard
    and batch given another value of the same column too (a side_fill line of its own)."""
    import pyarrow.parquet as pq
    from side_support import K, pad_and_real, plant_side, row_with_pad, set_column

    from slab_support import resign
    out = str(tmp_path / "out")
    shutil.copytree(src, out)
    shard = read_manifest(out)["shards"][0]["file"]
    t = pq.read_table(f"{out}/{shard}")
    first = row_with_pad(t)
    t = plant_side(t, case)
    if second:
        col = SIDE_CASES[case]
        r2 = next(r for r in range(first + 1, t.num_rows)
                  if sum(t.column("seq_lens")[r].as_py()) < len(t.column("input_ids")[r]))
        values = t.column(col).to_pylist()
        values[r2][pad_and_real(t, r2)[0]] = 0.5 if col == "lp" else [3] + [-1] * (K - 1)
        t = set_column(t, col, values)
    pq.write_table(t, f"{out}/{shard}")
    resign(out, shard)
    return out, first


@pytest.mark.parametrize("case", list(SIDE_CASES))
def test_a_side_null_or_length_is_one_line_and_the_batch_is_still_checked(side_pack, tmp_path, case):
    out, row = _plant(side_pack, tmp_path, case)
    r = verify(out, workers=1)
    check = "side_length" if case == "side_length" else "side_null"
    assert r.counts == {check: 1}, _said(r)
    assert r.problems[0].row == row and repr(SIDE_CASES[case]) in r.problems[0].message, _said(r)
    r = verify(_plant(side_pack, tmp_path / "2", case, second=True)[0], workers=1)
    assert r.counts == {check: 1, "side_fill": 1}, _said(r)
