"""Rows written as an input file of each format the tokenize tests read them from (the helper
eight tests/tokenize modules each kept a copy of)."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

FORMATS = ("jsonl", "json", "parquet")


def write_rows(folder, rows: list[dict], fmt: str, name: str = "d", schema: pa.Schema | None = None) -> str:
    """`rows` as `folder/NAME.FMT`: JSON Lines (one object a line), a JSON array, or Parquet
    (typed by `schema`, a row's missing keys null; else Arrow's inference). Returns its path."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt {fmt!r}: one of {FORMATS}")
    path = folder / f"{name}.{fmt}"
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif fmt == "json":
        path.write_text(json.dumps(rows))
    else:
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return str(path)


def token_rows_jsonl(folder, n: int = 20, name: str = "toks.jsonl") -> str:
    """`n` pre-tokenized rows of 7-11 ids as `folder/NAME` (the small pack the cache-root tests run)."""
    return write_rows(folder, [{"input_ids": list(range(1, 8 + i % 5))} for i in range(n)], "jsonl",
                      name=name.removesuffix(".jsonl"))


TABLE_KINDS = ("parquet", "jsonl", "arrow", "table", "datasets")


def table_as(folder, kind: str, table: pa.Table):
    """`table` as an input of `kind`: itself ("table"), a datasets.Dataset over it, or written as
    `folder/rows.KIND` (Parquet, an Arrow IPC file, JSON Lines) and its path returned (the
    row builders of the loss-column tests, test_loss_mask_names and test_two_loss_sources)."""
    if kind == "table":
        return table
    if kind == "datasets":
        import pytest
        return pytest.importorskip("datasets").Dataset(table)
    path = str(folder / f"rows.{kind}")
    if kind == "parquet":
        pq.write_table(table, path)
    elif kind == "arrow":
        from pyarrow import feather
        feather.write_feather(table, path)
    elif kind == "jsonl":
        with open(path, "w") as f:
            for r in table.to_pylist():
                f.write(json.dumps(r) + "\n")
    else:
        raise ValueError(f"kind {kind!r}: one of {TABLE_KINDS}")
    return path


def slab_masks(out: str) -> dict[int, list[int]]:
    """{source row: its loss_mask} read back from a packed output's one shard (the loss-column
    tests' check of what was packed)."""
    masks = {}
    for slab in pq.read_table(f"{out}/slabs-00000.parquet", columns=["source_index", "seq_lens",
                                                                     "loss_mask"]).to_pylist():
        at = 0
        for row, n in zip(slab["source_index"], slab["seq_lens"]):
            masks[row] = slab["loss_mask"][at:at + n]
            at += n
    return masks
