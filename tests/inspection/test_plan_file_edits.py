"""S32-15: a plan file (`plan --output`) is checked on read as slabs are: a null, a source row
planned twice or never, a segment's start or length edited is refused naming the row and the
column, not reported as a good plan nor blamed on flags the user did not give."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from packtool.align import Alignment
from packtool.inspection.planned import inspect_plan_file
from packtool.inspection.report import InspectError
from packtool.planning.core import PackingConfig, plan
from packtool.planning.plan_file import write_plan

LENGTHS = np.random.default_rng(2).integers(5, 400, 120)


def _put(col, value, row=0):
    def edit(t):
        a = t[col].to_pylist()
        a[row] = value(a) if callable(value) else value
        return t.set_column(t.schema.get_field_index(col), col, pa.array(a, t.schema.field(col).type))
    return edit


EDITS = {  # name -> (edit of the table, words the message holds)
    "source_repeated": (_put("source_index", lambda a: a[1]), "twice"),
    "source_missing": (_put("source_index", lambda a: max(a) + 1), "no segment"),
    "last_source_dropped": (lambda t: t.filter(pa.array(np.asarray(t["source_index"]) != max(t["source_index"].to_pylist()))),
                            "sequences"),
    "chunk_renumbered": (_put("chunk_index", 3), "numbered"),
    "start_overlaps": (_put("start", 999, row=1), "starts at 999"),
    "length_over_C": (_put("length", 5000), "edited"),
    "length_zero": (_put("length", 0), "length 0"),
    **{f"null:{c}": (_put(c, None), f"'{c}' holds a null")
       for c in ("slab", "dp_rank", "step", "source_index", "chunk_index", "source_offset", "length", "padded",
                 "start")},
}


@pytest.fixture(scope="module")
def plan_path(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("plan") / "p.parquet")
    write_plan(plan(LENGTHS, Alignment(cp=2, capacity=1024), PackingConfig()), path)
    inspect_plan_file(path)  # the clean file reads
    return path


@pytest.mark.parametrize("edit", list(EDITS))
def test_an_edited_plan_file_is_refused_naming_the_row(plan_path, edit, tmp_path):
    fn, words = EDITS[edit]
    t = pq.read_table(plan_path)
    out = str(tmp_path / "edited.parquet")
    pq.write_table(fn(t).replace_schema_metadata(t.schema.metadata), out)
    with pytest.raises(InspectError) as e:
        inspect_plan_file(out)
    msg = str(e.value)
    assert words in msg and ("row" in msg or "sequences" in msg) and "--tp" not in msg and "\n" not in msg, msg
    assert "-9223372036854775808" not in msg, msg


# S37-3: edits that reached numpy's or the layout's words ("internal error" for a file of no rows,
# "slab 5 has no segments" naming no file), sized an allocation by an edited number (a slab or
# step number of 2^60), or were read as they were (a float length truncated, a slab's rows of two
# ranks or steps, a rank outside dp): every column's type and numbering, one line naming the file
def _map(col, fn, typ=None):
    def edit(t):
        a = fn(t[col].to_numpy().copy())
        return t.set_column(t.schema.get_field_index(col), col, pa.array(a, typ or t.schema.field(col).type))
    return edit


def _second_of_a_slab(col, value):
    """`col` of the first row that is not its slab's first (only a slab's first row was read)."""
    def edit(t):
        s = t["slab"].to_numpy()
        return _put(col, value, row=int(np.flatnonzero(s[1:] == s[:-1])[0]) + 1)(t)
    return edit


def _slab_rows(col, fn):
    """`col` of every row of slab 0 (a whole slab moved to another rank or step)."""
    def edit(t):
        s = t["slab"].to_numpy()
        return _map(col, lambda a: np.where(s == 0, fn(a), a))(t)
    return edit


SCHEDULE = {  # name -> (the plan's dp, edit, words the message holds)
    "no_rows": (1, lambda t: t.slice(0, 0), "holds no segment rows"),
    "slab_gap": (1, _map("slab", lambda a: np.where(a >= 5, a + 1000, a)), "is in slab 1005 after slab 4"),
    "slab_gap_2^60": (2, _map("slab", lambda a: np.where(a >= 5, a + 2 ** 60, a)), "after slab 4"),
    "slab_negative": (1, _map("slab", lambda a: a - 1), "segment row 0 is in slab -1"),
    "slab_from_1": (1, _map("slab", lambda a: a + 1), "segment row 0 is in slab 1"),
    "slab_rows_apart": (1, lambda t: t.take(pa.array(np.roll(np.arange(t.num_rows), 1))), "each slab's rows together"),
    "dp_rank_of_one_row": (2, _second_of_a_slab("dp_rank", lambda a: 1 - a[0]), "has dp_rank"),
    "step_of_one_row": (2, _second_of_a_slab("step", 99), "has step 99"),
    "dp_rank_outside_dp": (2, _map("dp_rank", lambda a: a + 5), "outside 0..1 of the plan's dp=2"),
    "dp_rank_negative": (2, _slab_rows("dp_rank", lambda a: a * 0 - 1), "outside 0..1"),
    "dp_ranks_unequal": (2, _slab_rows("dp_rank", lambda a: 1 - a), "rank"),
    "step_2^30": (2, _map("step", lambda a: a + 2 ** 30), "step 1073741824"),
    "step_skipped": (2, _map("step", lambda a: np.where(a >= 3, a + 1, a)), "steps are numbered 0, 1"),
    "step_twice_without_dp": (1, _slab_rows("step", lambda a: a * 0 + 1 + (a == 1)), "a step of its own"),
    "length_float": (1, _map("length", lambda a: a + 0.5, pa.float64()), "'length' holds double"),
    "slab_text": (1, _map("slab", lambda a: a.astype(str), pa.string()), "'slab' holds string"),
    "length_list": (1, lambda t: t.set_column(t.schema.get_field_index("length"), "length",
                                              pa.array([[int(x)] for x in t["length"].to_numpy()])), "'length' holds list"),
    "slab_uint64": (1, _map("slab", lambda a: a.astype(np.uint64), pa.uint64()), "'slab' holds uint64"),
}


@pytest.fixture(scope="module")
def plan_paths(tmp_path_factory, plan_path):
    path = str(tmp_path_factory.mktemp("plan") / "dp2.parquet")
    write_plan(plan(LENGTHS, Alignment(cp=2, capacity=1024), PackingConfig(dp=2)), path)
    inspect_plan_file(path)
    return {1: plan_path, 2: path}


def _edited(plan_paths, name, tmp_path):
    dp, fn, _ = SCHEDULE[name]
    t = pq.read_table(plan_paths[dp])
    out = str(tmp_path / f"plan_{name}.parquet")
    pq.write_table(fn(t).replace_schema_metadata(t.schema.metadata), out)
    return out


@pytest.mark.parametrize("edit", list(SCHEDULE))
def test_an_edited_plan_file_is_refused_as_the_file_it_is(plan_paths, edit, tmp_path):
    out = _edited(plan_paths, edit, tmp_path)
    with pytest.raises(InspectError) as e:
        inspect_plan_file(out)
    msg = str(e.value)
    assert msg.startswith(f"{out}: ") and SCHEDULE[edit][2] in msg and "\n" not in msg, msg
    assert "write it again with `packtool plan --output`" in msg, msg


@pytest.mark.parametrize("edit", ["no_rows", "slab_gap"])
def test_the_command_names_the_file_and_the_flag(plan_paths, edit, tmp_path):
    import json

    from typer.testing import CliRunner

    from packtool.cli.app import app
    out = _edited(plan_paths, edit, tmp_path)
    r = CliRunner().invoke(app, ["inspect", "--plan", out, "--json"])
    err = json.loads(r.stdout)["error"]
    assert r.exit_code == 2 and (err["path"], err["flag"], err["type"]) == (out, "--plan", "InspectError"), err
    r = CliRunner().invoke(app, ["inspect", "--plan", out])
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.exit_code == 2 and len(lines) == 1 and out in lines[0] and "internal error" not in lines[0], r.stderr


# Stop 37's Left 5: `source_offset` (each segment's first token in its source row) was never read,
# so a plan whose chunks overlap or leave a gap in their row was reported as good, with sequence
# lengths (each row's chunks summed) that were not the rows'. Its chunks must tile the row.
SPLIT = Alignment(capacity=128)


def _first_chunk(k):
    """The row of the first segment that is chunk `k` of its source row."""
    return lambda t: int(np.flatnonzero(t["chunk_index"].to_numpy() == k)[0])


def _offset(k, fn):
    def edit(t):
        return _put("source_offset", fn, row=_first_chunk(k)(t))(t)
    return edit


OFFSETS = {  # name -> (edit, words the message holds)
    "chunk_0_not_at_0": (_offset(0, 5), "has source_offset 5, expected 0"),
    "chunk_1_overlaps": (_offset(1, lambda a: 1), "has source_offset 1, expected"),
    "chunk_1_leaves_a_gap": (_offset(1, lambda a: 10 ** 6), "has source_offset 1000000, expected"),
    "negative": (_offset(0, -1), "has source_offset -1, expected 0"),
    "null": (_offset(1, None), "'source_offset' holds a null"),
    "float": (_map("source_offset", lambda a: a + 0.5, pa.float64()), "'source_offset' holds double"),
}


@pytest.fixture(scope="module")
def split_path(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("plan") / "split.parquet")
    write_plan(plan(LENGTHS, SPLIT, PackingConfig(overflow="split")), path)
    return path


@pytest.mark.parametrize("edit", list(OFFSETS))
def test_a_plan_whose_chunks_do_not_tile_their_row_is_refused(split_path, edit, tmp_path):
    fn, words = OFFSETS[edit]
    t = pq.read_table(split_path)
    out = str(tmp_path / "edited.parquet")
    pq.write_table(fn(t).replace_schema_metadata(t.schema.metadata), out)
    with pytest.raises(InspectError) as e:
        inspect_plan_file(out)
    msg = str(e.value)
    assert msg.startswith(f"{out}: ") and words in msg and "\n" not in msg, msg
    assert "write it again with `packtool plan --output`" in msg, msg


@pytest.mark.parametrize("overflow", ["split", "truncate", "singleton"])
def test_a_clean_plan_reads_with_the_lengths_it_was_made_of(overflow, tmp_path):
    path = str(tmp_path / "p.parquet")
    write_plan(plan(LENGTHS, SPLIT, PackingConfig(overflow=overflow)), path)
    rep = inspect_plan_file(path)
    if overflow != "truncate":  # truncate's rows are cut: the plan holds what is kept
        from packtool.inspection.report import _length_histogram
        assert rep.length_histogram == _length_histogram(np.asarray(LENGTHS))
