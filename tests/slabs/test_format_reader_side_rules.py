"""S49B-2: FORMAT.md's standalone reader held a side column's manifest entry to its shard field's
record and its Arrow type only, and to "a string" for name, dtype and kind: an entry edited with
its record alike (a kind not values/support, a float support column, a float16 dtype, a name that
is a batch key, not a name, or the shift_NAME of another side column, `row` false or not a
boolean, a key packtool never writes) was read whole, where verify and every packtool reader
refuse it. The cases come from packtool/side.py's own rules (its DTYPES, KINDS, RESERVED and
name pattern), so the reader is held to the rules packtool writes by."""
from __future__ import annotations

import json
import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from side_support import side_output  # noqa: F401  (the module's fixture)
from slab_support import format_reader, read_manifest, resign, save_manifest

from packtool import side


def _both(col: str, edit, cast=None):
    """Side column `col`'s manifest entry and every shard field's record of it edited alike (its
    type cast by `cast`, its name followed everywhere the manifest names it), re-signed."""
    def run(out):
        m = read_manifest(out)
        entry = next(c for c in m["side_columns"] if c["name"] == col)
        edit(entry)
        new = entry["name"]
        if new != col:
            for key in ("side_nan", "side_inf"):
                if col in m["stats"][key]:
                    m["stats"][key][new] = m["stats"][key].pop(col)
            t = m["input"]["tokenize"]
            for key in ("side_columns", "support_columns"):
                if isinstance(t.get(key), list):
                    t[key] = [new if x == col else x for x in t[key]]
        save_manifest(out, m)
        for s in m["shards"]:
            path = os.path.join(out, s["file"])
            t = pq.read_table(path)
            i = t.schema.get_field_index(col)
            meta = {**(t.schema.field(i).metadata or {}), b"packtool.side_column": json.dumps(entry, sort_keys=True).encode()}
            arr = t.column(i) if cast is None else cast(t.column(i))
            pq.write_table(t.set_column(i, pa.field(new, arr.type, metadata=meta), arr), path)
            resign(out, s["file"])
    return run


def _set(key, value):
    return lambda c: c.__setitem__(key, value)


CASES = {
    **{f"name {n!r} (RESERVED)": _both("lp", _set("name", n)) for n in ("labels", "position_ids", "attention_mask")},
    **{f"name {n[:8]!r} (not a name)": _both("lp", _set("name", n)) for n in ("top k", "9lp", "x" * 129)},
    "name 'shift_lp' beside 'lp'": _both("sup", _set("name", "shift_lp")),
    "dtype float16": _both("lp", _set("dtype", "float16"), lambda a: a.cast(pa.list_(pa.float16()))),
    **{f"kind {k!r}": _both("lp", _set("kind", k)) for k in ("zzz", "Values")},
    "kind support on a float column": _both("lp", _set("kind", "support")),
    "row false": _both("lp", _set("row", False)),
    "row 'yes'": _both("lp", _set("row", "yes")),
    "a key packtool never writes": _both("lp", _set("note", "x")),
}


def test_the_cases_follow_side_pys_rules():
    """Every name in a case's rule comes from side.py: a rule it changes changes the cases."""
    assert {"labels", "position_ids", "attention_mask"} <= side.RESERVED and "float16" not in side.DTYPES
    assert "zzz" not in side.KINDS and "Values" not in side.KINDS and "support" in side.KINDS
    assert side.name_problem("top k") and side.name_problem("9lp") and side.name_problem("x" * 129)
    mod = format_reader()
    assert mod.RESERVED == side.RESERVED, sorted(mod.RESERVED ^ side.RESERVED)


@pytest.mark.parametrize("case", CASES)
def test_the_standalone_reader_refuses_a_side_entry_packtool_never_writes(side_output, case, tmp_path):  # noqa: F811
    from packtool.verification.run import verify
    out = str(tmp_path / "out")
    shutil.copytree(side_output, out)
    CASES[case](out)
    assert not verify(out, workers=1).ok, "verify took it: not a lie"
    with pytest.raises(ValueError) as e:
        format_reader().open_output(out)
    assert "side_columns[" in str(e.value) and "\n" not in str(e.value), str(e.value)
