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
       for c in ("slab", "dp_rank", "step", "source_index", "chunk_index", "length", "padded", "start")},
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
