"""Arrow <-> numpy for the pack path without pyarrow's pandas shim.

`pa.Array.to_numpy()` and `pa.array(ndarray)` import pandas and pyarrow.compute on first use
(~0.5-1.3 s on this 2-core machine: most of a 100k-row pack of a pre-tokenized file). These
helpers read and build primitive arrays through their buffers instead: zero-copy, same dtype,
read-only views exactly like `to_numpy(zero_copy_only=True)`; booleans unpacked from their bits
(a copy, as pyarrow makes). Anything else (nulls, strings) falls back to pyarrow's own conversion.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["arrow_of", "first_null", "list_parts", "list_view_said", "np_of", "null_rows", "span_mask"]


def list_view_said(t: pa.DataType) -> str | None:
    """What to say of a column in Arrow's list_view layout (offsets and sizes), at any list level:
    a list per row all the same, which packtool's readers do not take (they read a list's
    offsets); None for any other type."""
    while pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        t = t.value_type
    if not (pa.types.is_list_view(t) or pa.types.is_large_list_view(t)):
        return None
    return ("Arrow's list_view layout is not supported; cast the column to a list type (pyarrow: table.cast "
            "with pa.list_(...) in place of pa.list_view(...)) and write it again")


def _primitive(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def np_of(a: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A numpy view of an Arrow array (chunks concatenated)."""
    if isinstance(a, pa.ChunkedArray):
        if not a.num_chunks:
            if pa.types.is_boolean(a.type):
                return np.empty(0, bool)
            return np.empty(0, _dtype(a.type)) if _primitive(a.type) else a.to_numpy()
        parts = [np_of(c) for c in a.chunks]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)
    t = a.type
    if not a.null_count and pa.types.is_boolean(t):  # Arrow's bits unpacked (a copy, as to_numpy makes)
        bits = np.frombuffer(a.buffers()[1], np.uint8)
        return np.unpackbits(bits, count=a.offset + len(a), bitorder="little")[a.offset:].astype(bool)
    if a.null_count or not _primitive(t):
        return a.to_numpy(zero_copy_only=False)
    dt = _dtype(t)
    return np.frombuffer(a.buffers()[1], dtype=dt, count=len(a), offset=a.offset * dt.itemsize)


def _dtype(t: pa.DataType) -> np.dtype:
    return np.dtype(str(t) if str(t) not in ("halffloat", "float", "double") else
                    {"halffloat": "float16", "float": "float32", "double": "float64"}[str(t)])


def list_parts(col: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(flat values of the rows in `col`, row offsets starting at 0) of a list array, slices
    respected; the values are a view into the child array."""
    offs = np_of(col.offsets)
    values = np_of(col.values)[offs[0]:offs[-1]] if len(col) else np_of(col.values)[:0]
    return values, offs - offs[0] if len(offs) and offs[0] else offs


def arrow_of(values: np.ndarray) -> pa.Array:
    """A primitive Arrow array over a contiguous numpy array (zero-copy); booleans are packed
    into Arrow's bits (a copy)."""
    if values.dtype == np.bool_:
        bits = np.packbits(values, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values),
                                 [None, pa.py_buffer(values)])


def span_mask(total: int, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """A bool mask of `total` positions, True inside every [starts[i], starts[i] + lens[i])
    (spans that do not overlap: a slab's real tokens, from its segments' starts and lengths)."""
    d = np.zeros(total + 1, np.int64)
    np.add.at(d, np.asarray(starts, np.int64), 1)
    np.add.at(d, np.asarray(starts, np.int64) + np.asarray(lens, np.int64), -1)
    return np.cumsum(d[:-1]) > 0


def first_null(a: pa.Array | pa.ChunkedArray) -> int:
    """The first row of `a` holding a null at any depth (the row itself, or a value inside
    its list, or inside a list of its list), or -1. A row's own null_count is not enough:
    a null inside `input_ids` leaves the column's count at 0 and reads back as NaN."""
    if isinstance(a, pa.ChunkedArray):  # chunk by chunk: combining copied every column a reader
        base = 0                         # checked (9 of 10 parts of check_nulls' time)
        for chunk in a.chunks:
            r = first_null(chunk)
            if r >= 0:
                return base + r
            base += len(chunk)
        return -1
    if a.null_count:
        return int(np.flatnonzero(a.is_null().to_numpy(zero_copy_only=False))[0])
    t = a.type
    # the rows' values cut from `.values` by hand (slices respected): `.flatten()` imports
    # pyarrow.compute on first use, 25 ms of a reader's start (BENCHMARKS.md, "Consumer checks")
    if pa.types.is_fixed_size_list(t):
        k = first_null(a.values.slice(a.offset * t.list_size, len(a) * t.list_size))
        return k // t.list_size if k >= 0 else -1
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        return -1
    offs = np_of(a.offsets).astype(np.int64)
    k = first_null(a.values.slice(int(offs[0]), int(offs[-1] - offs[0])))
    return int(np.searchsorted(offs - offs[0], k, "right") - 1) if k >= 0 else -1


def null_rows(a: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Per row of `a`: whether it holds a null at any depth. Row by row: for an array that
    `first_null` found damaged, to set its rows apart."""
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    return np.fromiter((first_null(a.slice(i, 1)) >= 0 for i in range(len(a))), bool, len(a))
