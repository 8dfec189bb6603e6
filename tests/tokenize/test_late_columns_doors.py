"""S46A-6: every door that reads an input in batches held its columns to the first batch's: a
`loss_mask`, `labels` or `attention_mask` first held by a later batch was read away and the row
trained on its prompt (or its padding), rc 0, no word: past a JSON file's first block (fixed
with S46A-5), in a later file of a `pyarrow.dataset.Dataset` (its schema is its first file's),
in a later batch of an `IterableDataset` without features. Every such door now asks one rule
(tokenize/late_columns.py): a column a later batch holds is the first rows' refusal, naming the
row; one a later batch lacks is that row without it (the per-row refusal), never packed wrong.
Over every door and every per-token column (the three and a side column), both ways."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

from packtool.errors import PacktoolInputError
from packtool.tokenize import text_readers
from packtool.tokenize.config import TokenizeConfig
from packtool.tokenize.pipeline import tokenize_to_cache

N = 1500  # rows before the late one: past a JSON Lines peek, in a later batch of the others
IDS = [11, 12, 13, 14, 15, 16]
COLUMNS = {  # the column, the late row's value, the config that reads it
    "loss_mask": ([0, 0, 0, 0, 1, 1], {}),
    "labels": ([-100, -100, -100, -100, 15, 16], {}),
    "assistant_masks": ([0, 0, 0, 0, 1, 1], {}),  # the loss mask under transformers' / TRL's names (S47A-6)
    "completion_mask": ([0, 0, 0, 0, 1, 1], {}),
    "attention_mask": ([1, 1, 1, 0, 0, 0], {}),
    "a side column": ([0.5] * 6, {"side_columns": ("adv",)}),
}


def _name(column: str) -> str:
    return "adv" if column == "a side column" else column


def _rows(column: str, late_has_it: bool) -> list[dict]:
    """N rows, then the late one: only it holds the column, or every row but it."""
    value, _ = COLUMNS[column]
    plain = {"input_ids": [100, 101, 102, 103, 104, 105]}
    early = plain if late_has_it else {**plain, _name(column): [1] * 6 if column != "labels" else plain["input_ids"]}
    if column == "a side column" and not late_has_it:
        early = {**plain, "adv": [0.25] * 6}
    late = {"input_ids": IDS, _name(column): value} if late_has_it else {"input_ids": IDS}
    return [dict(early) for _ in range(N)] + [late]


def _jsonl(tmp_path, rows, monkeypatch):
    monkeypatch.setattr(text_readers, "_JSONL_BLOCK", 4096)  # the late row in a later parse block
    p = tmp_path / "rows.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(p)


def _pyarrow_dataset(tmp_path, rows, monkeypatch):
    (tmp_path / "pds").mkdir()
    pq.write_table(pa.Table.from_pylist(rows[:N]), tmp_path / "pds" / "a.parquet")
    pq.write_table(pa.Table.from_pylist(rows[N:]), tmp_path / "pds" / "b.parquet")
    return pads.dataset(str(tmp_path / "pds"), format="parquet")


def _iterable(tmp_path, rows, monkeypatch):
    datasets = pytest.importorskip("datasets")
    it = datasets.IterableDataset.from_generator(lambda: iter(rows))
    assert it.features is None  # as from_generator and a streamed JSON give: columns unknown up front
    return it


DOORS = {"jsonl": _jsonl, "pyarrow.dataset": _pyarrow_dataset, "IterableDataset": _iterable}


def _tokenize(tmp_path, src, column):
    cfg = TokenizeConfig(shape="tokens", **COLUMNS[column][1])
    return tokenize_to_cache([src], cfg, str(tmp_path / "cache"), progress=False)


@pytest.mark.parametrize("column", COLUMNS)
@pytest.mark.parametrize("door", DOORS)
def test_a_column_first_held_by_a_later_batch_is_refused_never_read_away(tmp_path, monkeypatch, door, column):
    src = DOORS[door](tmp_path, _rows(column, late_has_it=True), monkeypatch)
    with pytest.raises(PacktoolInputError) as e:
        _tokenize(tmp_path, src, column)
    msg = str(e.value)
    assert "\n" not in msg and _name(column) in msg, msg
    if column != "a side column":  # a side column named but absent from the first rows: refused up front
        assert e.value.row == N and f"row {N}:" in msg and "first holds a value here" in msg, msg
        assert "give every row the column" in msg, msg


@pytest.mark.parametrize("column", COLUMNS)
@pytest.mark.parametrize("door", DOORS)
def test_a_column_a_later_batch_lacks_is_that_row_refused(tmp_path, monkeypatch, door, column):
    src = DOORS[door](tmp_path, _rows(column, late_has_it=False), monkeypatch)
    with pytest.raises(PacktoolInputError) as e:
        _tokenize(tmp_path, src, column)
    msg = str(e.value)
    assert "\n" not in msg and _name(column) in msg and e.value.row == N, msg


@pytest.mark.parametrize("door", ["pyarrow.dataset", "IterableDataset"])
def test_every_batch_holding_the_columns_packs_as_before(tmp_path, monkeypatch, door):
    rows = [{"input_ids": [100, 101, 102], "loss_mask": [0, 1, 1]}] * N + [
        {"input_ids": IDS, "loss_mask": [0, 0, 0, 0, 1, 1]}]
    src = DOORS[door](tmp_path, rows, monkeypatch)
    cache = _tokenize(tmp_path, src, "loss_mask")
    assert cache.num_rows == N + 1


def test_a_schema_given_without_a_column_every_file_holds_is_read_as_asked(tmp_path):
    """A dataset given a schema that leaves out a column its first file holds too: the projection
    is the user's (the class is a batch differing from the FIRST one), packed as asked."""
    (tmp_path / "pds").mkdir()
    for n in ("a", "b"):
        pq.write_table(pa.table({"input_ids": [IDS], "loss_mask": [COLUMNS["loss_mask"][0]]}),
                       tmp_path / "pds" / f"{n}.parquet")
    d = pads.dataset(str(tmp_path / "pds"), format="parquet", schema=pa.schema([("input_ids", pa.list_(pa.int64()))]))
    cache = tokenize_to_cache([d], TokenizeConfig(shape="tokens"), str(tmp_path / "cache"), progress=False)
    assert cache.num_rows == 2
