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
