"""A column of token ids (`input_ids`, `labels`) that holds booleans is refused (S45A-4): true/false
where ids belong is a mask saved under the wrong name (attention_mask, a bool loss_mask), and read
as ids 1/0 every row became a run of tokens 0 and 1, trained on, rc 0. The class: both id columns,
every file type that holds lists (Parquet, its fixed-size lists, JSON Lines, JSON, Arrow IPC) and an
in-memory table, through tokenize and through `packtool pack` (exit 2, one line). A mask column
(`loss_mask`, `attention_mask`) of booleans stays what it is: read as 0/1."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

from packtool.errors import PacktoolInputError
from packtool.tokenize import tokenize_to_cache
from packtool.tokenize.config import TokenizeConfig

IDS = [[1, 2, 3], [4, 5, 6]]
BOOLS = [[True, False, True], [True, True, False]]


def _table(col: str, fixed: bool = False) -> pa.Table:
    """input_ids (and labels) with `col` the booleans; `fixed`: fixed-size lists of 3."""
    def arr(v, kind):
        return pa.array(v, pa.list_(kind, 3) if fixed else pa.list_(kind))
    if col == "input_ids":
        return pa.table({"input_ids": arr(BOOLS, pa.bool_())})
    return pa.table({"input_ids": arr(IDS, pa.int64()), col: arr(BOOLS, pa.bool_())})


def _write(tmp_path, fmt: str, col: str):
    if fmt == "table":
        return _table(col)
    t = _table(col, fixed=fmt == "parquet-fixed")
    rows = t.to_pylist()
    path = tmp_path / {"parquet": "in.parquet", "parquet-fixed": "in.parquet", "jsonl": "in.jsonl",
                       "json": "in.json", "arrow": "in.arrow"}[fmt]
    if fmt.startswith("parquet"):
        pq.write_table(t, path)
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif fmt == "json":
        path.write_text(json.dumps(rows))
    else:
        feather.write_feather(t, str(path))
    return str(path)


FORMATS = ["parquet", "parquet-fixed", "jsonl", "json", "arrow", "table"]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("col", ["input_ids", "labels"])
def test_booleans_in_an_id_column_are_refused(tmp_path, cache_dir, fmt, col):
    src = _write(tmp_path, fmt, col)
    with pytest.raises(PacktoolInputError) as e:
        tokenize_to_cache([src], TokenizeConfig(shape="tokens"), cache_dir, progress=False)
    said = str(e.value)
    assert "\n" not in said and f"{col} holds lists of bool" in said and "row 0" in said, said
    assert "mask" in said and "integers" in said, said
    if fmt != "table":
        assert src in said, said


@pytest.mark.parametrize("col", ["input_ids", "labels"])
def test_pack_refuses_them_in_one_line(tmp_path, col):
    from typer.testing import CliRunner

    from packtool.cli.app import app
    src = _write(tmp_path, "jsonl", col)
    r = CliRunner().invoke(app, ["pack", src, "-C", "64", "-o", str(tmp_path / "out"),
                                 "--cache-dir", str(tmp_path / "cache"), "-q"])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert f"{col} holds lists of bool" in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_a_boolean_mask_is_still_read(tmp_path, cache_dir, fmt):
    rows = [{"input_ids": i, "loss_mask": m, "attention_mask": [True] * 3}
            for i, m in zip(IDS, [[False, True, True], [True, True, False]])]
    path = tmp_path / f"in.{fmt}"
    if fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    c = tokenize_to_cache([str(path)], TokenizeConfig(shape="tokens"), cache_dir, progress=False)
    r = c.read_rows(np.arange(c.num_rows))
    assert r.input_ids.tolist() == [1, 2, 3, 4, 5, 6] and r.loss_mask.tolist() == [0, 1, 1, 1, 1, 0]


def test_an_entry_that_read_them_as_ids_is_not_reused(tmp_path, monkeypatch):
    """A cache entry made while booleans passed as ids 1/0 (cache version 8) is not reused: the
    file is read again and refused, not packed from the old entry."""
    from typer.testing import CliRunner

    import packtool.engines.ray_cache as ray_cache
    import packtool.tokenize.cache as cache
    import packtool.tokenize.cache_entry as cache_entry
    import packtool.tokenize.pipeline as pipeline
    import packtool.tokenize.request as request
    import packtool.tokenize.token_rows as token_rows
    from packtool.cli.app import app
    src = _write(tmp_path, "jsonl", "input_ids")
    argv = ["pack", src, "-C", "64", "--cache-dir", str(tmp_path / "cache"), "-q"]
    with monkeypatch.context() as old:  # the rule and cache version before booleans were refused
        old.setattr(token_rows, "MASKS", (*token_rows.MASKS, "input_ids"))
        for m in (cache_entry, cache, request, pipeline, ray_cache):
            old.setattr(m, "CACHE_VERSION", 8)
        r = CliRunner().invoke(app, [*argv, "-o", str(tmp_path / "o1")])
        assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, [*argv, "-o", str(tmp_path / "o2")])
    assert r.exit_code == 2 and "input_ids holds lists of bool" in r.output, r.output
    assert not (tmp_path / "o2").exists()
