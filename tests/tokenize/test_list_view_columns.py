"""S40-7 (issue 23 class 6: messages a user can act on). A column in Arrow's list_view layout
(`pa.list_view`, `pa.large_list_view`, at any list level) is a list per row, yet a side column so
written was refused as "not a list per row" and `input_ids` as "not a list of integers per row;
write each row's ids as a list". Every list column packtool reads from a table now says what it
is and the fix: cast it to a list type (arrays.list_view_said, the one wording). And a field of two
JSON types said "but a array": "an array", "an object"."""
from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

from packtool.align import Alignment
from packtool.errors import PacktoolInputError
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig

IDS = [[1, 2, 3], [4, 5]]
LP = [[0.1, 0.2, 0.3], [0.5, 0.6]]
COLUMNS = {  # name -> (the table, side columns asked for)
    "input_ids:list_view": ({"input_ids": pa.array(IDS, pa.list_view(pa.int32()))}, ()),
    "input_ids:large_list_view": ({"input_ids": pa.array(IDS, pa.large_list_view(pa.int64()))}, ()),
    "side:list_view": ({"input_ids": pa.array(IDS), "lp": pa.array(LP, pa.list_view(pa.float32()))}, ("lp",)),
    "side:large_list_view": ({"input_ids": pa.array(IDS), "lp": pa.array(LP, pa.large_list_view(pa.float64()))},
                             ("lp",)),
    "side:K-wide-inner-list_view": ({"input_ids": pa.array(IDS), "lp": pa.array(
        [[[v] for v in r] for r in LP], pa.list_(pa.list_view(pa.float32())))}, ("lp",)),
}
WRITERS = {"parquet": lambda t, p: pq.write_table(t, p), "arrow": lambda t, p: feather.write_feather(t, p)}


@pytest.mark.parametrize("fmt", list(WRITERS))
@pytest.mark.parametrize("case", list(COLUMNS))
def test_list_view_column_is_named_with_its_fix(tmp_path, case, fmt):
    from packtool.packing import pack
    cols, side = COLUMNS[case]
    src = str(tmp_path / f"in.{fmt}")
    WRITERS[fmt](pa.table(cols), src)
    out = str(tmp_path / "out")
    with pytest.raises(PacktoolInputError) as e:
        pack([src], Alignment(capacity=64), PackingConfig("bfd"), TokenizeConfig(shape="tokens", side_columns=side),
             output=out, cache_dir=str(tmp_path / "cache"))
    msg = str(e.value)
    assert "\n" not in msg and "list_view" in msg and "cast the column to a list type" in msg, msg
    assert "not a list" not in msg, msg
    assert ("side column lp" in msg) == case.startswith("side"), msg
    assert not os.path.exists(out)


def test_list_view_side_column_on_the_cli(tmp_path):
    """The finding's example, as a user runs it: exit 2, one error line, no traceback."""
    src = str(tmp_path / "f.parquet")
    pq.write_table(pa.table(COLUMNS["side:list_view"][0]), src)
    r = subprocess.run([sys.executable, "-m", "packtool", "pack", src, "--side-columns", "lp", "-C", "256",
                        "-o", str(tmp_path / "o"), "--cache-dir", str(tmp_path / "c")], capture_output=True, text=True)
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.returncode == 2 and len(errors) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "list_view" in errors[0] and "row 0" in errors[0] and "side column lp" in errors[0], errors


@pytest.mark.parametrize("first,second,said", [('[1, 2, 3]', '"1 2 3"', "but an array at line 1"),
                                               ('{"a": 1}', '"x"', "but an object at line 1"),
                                               ('"x"', '[1]', "but a string at line 1"),
                                               ('1', '"x"', "but a number at line 1")])
def test_json_type_change_reads_with_its_article(tmp_path, first, second, said):
    from packtool.tokenize.json_types import block_table
    block = f'{{"input_ids": {first}}}\n{{"input_ids": {second}}}\n'.encode()
    with pytest.raises(PacktoolInputError) as e:
        block_table(block, "s.jsonl", 0)
    assert said in str(e.value) and " a array" not in str(e.value) and " a object" not in str(e.value), str(e.value)
