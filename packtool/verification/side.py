"""`verify`, per-token side columns (FORMAT.md "Side columns"): the schema the manifest
declares, and per record batch, length T per row, no null values, the fill on every position
that is not a real token, and for columns declared `kind: "support"` the sampler-support
rule on every real token (packtool/support_rule.py: -1 pads the end only, the token once, a
token the loss counts has candidates).

Vectorized over the batch (numpy over the flattened lists); the support rule is one numba
pass over the tokens.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from packtool.arrays import span_mask
from packtool.side import SideColumn
from packtool.support_rule import SUPPORT_RULES, first_breaks
from packtool.slabs.format import SCHEMA, side_field
from packtool.verification.problems import ProblemLog

_BUILT_IN = frozenset(SCHEMA.names)


def check_side_schema(schema: pa.Schema, side: tuple[SideColumn, ...], name: str, log: ProblemLog) -> bool:
    """Every declared side column present with its declared dtype and width; no column that
    is neither FORMAT.md's nor declared. False when a column cannot be checked further."""
    ok = True
    declared = {c.name for c in side}
    for col in schema.names:
        if col not in _BUILT_IN and col not in declared:
            log.add("schema", f"column {col!r} is not a FORMAT.md column and not declared in the manifest's "
                    f"side_columns", shard=name, found=str(schema.field(col).type))
    for c in side:
        want = side_field(c).type
        i = schema.get_field_index(c.name)
        if i < 0:
            log.add("schema", f"side column {c.name!r} is declared in the manifest but missing from the shard",
                    shard=name, expected=str(want), found=None)
            ok = False
            continue
        got = schema.field(i).type
        if got == want:
            continue
        inner = got.value_type if pa.types.is_list(got) else None
        got_w = inner.list_size if inner is not None and pa.types.is_fixed_size_list(inner) else \
            (1 if inner is not None and not pa.types.is_list(inner) and not pa.types.is_large_list(inner) else None)
        scalar = inner.value_type if got_w and got_w > 1 else inner
        if got_w != c.width:
            log.add("side_width", f"side column {c.name!r} is {got}: {got_w or 'not a fixed'} value(s) per token, "
                    f"the manifest declares width {c.width}", shard=name, expected=c.width, found=got_w)
        elif scalar != pa.from_numpy_dtype(c.np_dtype):
            log.add("side_dtype", f"side column {c.name!r} holds {scalar}, the manifest declares {c.dtype}",
                    shard=name, expected=c.dtype, found=str(scalar))
        else:
            log.add("schema", f"side column {c.name!r} has type {got}, FORMAT.md says {want}", shard=name,
                    expected=str(want), found=str(got))
        ok = False
    return ok


def check_side_batch(batch: pa.RecordBatch, side, ids: np.ndarray, ids_off: np.ndarray, loss: np.ndarray, seg_row: np.ndarray,
                     seg_start: np.ndarray, seq_lens: np.ndarray, fill_seg: np.ndarray, ok_rows: np.ndarray,
                     row0: int, where: dict, log: ProblemLog) -> None:
    """The per-row and per-token side column checks of one record batch (rows whose layout
    is broken are left to the layout checks)."""
    T = np.diff(ids_off)
    use = ok_rows[seg_row] & ~fill_seg
    starts = ids_off[seg_row[use]] + seg_start[use]
    real = span_mask(int(ids_off[-1]), starts, seq_lens[use])
    row_of = np.repeat(np.arange(T.size), T)
    for c in side:
        col = batch.column(c.name)
        offs = col.offsets.to_numpy().astype(np.int64)
        n = np.diff(offs)
        for r in np.flatnonzero(n != T)[:5]:
            log.add("side_length", f"side column {c.name!r} has {int(n[r])} entries, the slab has T={int(T[r])} "
                    f"tokens", row=row0 + int(r), expected=int(T[r]), found=int(n[r]), **where)
        if (n != T).any():
            continue
        flat = col.values.slice(int(offs[0]), int(offs[-1] - offs[0]))
        if c.width > 1:
            if flat.null_count:
                _null(c, flat, row_of, row0, where, log)
                continue
            flat = flat.values.slice(flat.offset * c.width, len(flat) * c.width)
        if flat.null_count:
            _null(c, flat, row_of if c.width == 1 else np.repeat(row_of, c.width), row0, where, log)
            continue
        vals = flat.to_numpy(zero_copy_only=False).reshape(-1, c.width)
        rows_ok = np.repeat(ok_rows, T)
        off_fill = ~real & rows_ok & (vals != np.asarray(c.fill, vals.dtype)).any(axis=1)
        hit = np.flatnonzero(off_fill)
        for p in hit[np.flatnonzero(np.diff(np.concatenate(([-1], row_of[hit]))))][:20]:
            r = int(row_of[p])
            log.add("side_fill", f"side column {c.name!r} holds {vals[p].tolist() if c.width > 1 else vals[p, 0].item()} "
                    f"at pad position {int(p - ids_off[r])}; every pad holds the fill {c.fill}",
                    row=row0 + r, expected=c.fill, **where)
        if c.is_support:
            first = first_breaks(vals, ids, real, np.asarray(loss, np.uint8))
            if (first >= 0).any():
                for k in np.flatnonzero(first >= 0):
                    p = int(first[k])
                    r = int(row_of[p])
                    log.add("side_support", f"side column {c.name!r}, position {int(p - ids_off[r])} (token "
                            f"{int(ids[p])}) holds {vals[p].tolist()}: {SUPPORT_RULES[k]}", row=row0 + r,
                            found=vals[p].tolist(), **where)


def _null(c: SideColumn, flat: pa.Array, row_of: np.ndarray, row0: int, where: dict, log: ProblemLog) -> None:
    p = int(np.flatnonzero(flat.is_null().to_numpy(zero_copy_only=False))[0])
    log.add("side_null", f"side column {c.name!r} holds a null value; a token without a value holds the "
            f"fill {c.fill}", row=row0 + int(row_of[p]), **where)
