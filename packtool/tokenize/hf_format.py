"""A `datasets.Dataset` with a transform packed as `ds[i]` shows it, not as it is stored.

Owns the rule for a custom format (`set_transform` / `with_transform`): `hf_input` reads a
Dataset's stored Arrow table zero-copy, which drops the transform, so the rows `ds[i]` gives
are read here instead, batch by batch as `Dataset.iter` gives them (the transform's `columns`
and `output_all_columns` included), its output read as Arrow. A Python function has no
content to key a cache by (a tokenizer or table it closes over can change under the same
code), so such a Dataset is never reused from the cache, as a stream is not. What it returns
that is not one row per row of Arrow-readable columns is refused in one line naming the batch.
"""
from __future__ import annotations

from typing import Callable, Iterator

import numpy as np
import pyarrow as pa

from packtool.errors import PacktoolError, PacktoolInputError

TRANSFORM = "its transform (set_transform/with_transform)"


def has_transform(ds) -> bool:
    """Whether `ds[i]` is a Python function's output, not the stored row."""
    return ds.format.get("type") == "custom"


def transformed(ds, name: str) -> tuple[tuple[str, ...], Callable[[int, list[str] | None], Iterator[pa.Table]]]:
    """(columns, read) of a Dataset with a transform: the columns its output has (one row run
    through it says), and batches of its output as Arrow tables, the rows `ds[i]` gives."""
    total = ds.num_rows
    first = _call(lambda: ds[:1], name, 0) if total else None
    columns = tuple(_as_table(first, name, 0, 1, None).column_names) if first is not None else ()

    def read(batch_size: int, wanted: list[str] | None) -> Iterator[pa.Table]:
        batches = iter(ds.iter(batch_size=batch_size))
        for start in range(0, total, batch_size):
            batch = _call(lambda: next(batches), name, start)
            table = _as_table(batch, name, start, min(batch_size, total - start), columns)
            yield table.select(wanted) if wanted is not None else table
    return columns, read


def _call(fn, name: str, start: int):
    """`fn()`, where the user's transform runs: its failure is one line naming the rows."""
    try:
        return fn()
    except PacktoolError:
        raise
    except Exception as e:  # the user's own code: any error it raises is theirs to fix
        text = str(e).strip().splitlines()
        raise PacktoolInputError(f"{TRANSFORM} failed on the batch from row {start}: {type(e).__name__}"
                                 f"{': ' + text[0] if text else ''}; fix it, or apply it with "
                                 f"ds.map(..., batched=True) and pass the result", path=name) from None


def _as_table(batch, name: str, start: int, rows: int, columns: tuple[str, ...] | None) -> pa.Table:
    """The transform's output for `rows` rows from `start` as an Arrow table, with the columns
    the first row had: anything else is one line naming the rows and the fix."""
    where = f"{TRANSFORM} returned"
    if not isinstance(batch, dict) and hasattr(batch, "keys"):
        batch = dict(batch)
    if not isinstance(batch, dict):
        raise PacktoolInputError(f"{where} a {type(batch).__name__} for the batch from row {start}, not a dict "
                                 "of columns; return {column: values}", path=name)
    if columns is not None and tuple(batch) != columns:
        raise PacktoolInputError(f"{where} columns {', '.join(map(str, batch)) or 'none'} for the batch from row "
                                 f"{start}, {', '.join(columns) or 'none'} for row 0: every batch must have the same "
                                 "columns", path=name)
    try:
        table = pa.table({str(k): _arrow_values(v) for k, v in batch.items()})
    except (pa.ArrowException, TypeError, ValueError) as e:
        raise PacktoolInputError(f"{where} values Arrow cannot hold for the batch from row {start} "
                                 f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); return lists "
                                 "of str, numbers or lists of them", path=name) from None
    if table.num_rows != rows:
        raise PacktoolInputError(f"{where} {table.num_rows} rows for the {rows} rows from row {start}: a transform "
                                 "keeps one row per row (use ds.map(..., batched=True) to add or drop rows)", path=name)
    return table


def _arrow_values(v):
    """A column as the transform gave it, as values pyarrow takes: a tensor (torch, tf, jax)
    through numpy, a 2-D array as its rows."""
    if not isinstance(v, (list, tuple, np.ndarray, pa.Array, pa.ChunkedArray)) and hasattr(v, "__array__"):
        v = np.asarray(v)
    if isinstance(v, np.ndarray) and v.ndim > 1:
        return list(v)
    return v


__all__ = ["has_transform", "transformed"]
