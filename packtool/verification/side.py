"""`verify`, per-token side columns (FORMAT.md "Side columns"): the schema the manifest
declares, and per record batch, length T per row, no null values (a slab that breaks either is left
out of that column's other checks and counts, said once), the fill on every position
that is not a real token, and for columns declared `kind: "support"` the sampler-support
rule on every real token (packtool/support_rule.py: -1 pads the end only, distinct ids below
the manifest's vocab_size, the token once, a token the loss counts has candidates).

Vectorized over the batch (numpy over the flattened lists); the support rule is one numba
pass over the tokens.
"""
from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from packtool.arrays import first_null, null_rows, span_mask
from packtool.side import SideColumn, nonfinite, per_token
from packtool.support_rule import broken, first_breaks
from packtool.slabs.schema import SCHEMA, side_field, side_field_problem
from packtool.tokenize.source_rows import describe_row
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
            problem = side_field_problem(schema.field(i), c)  # the entry the writer recorded in the field
            if problem:  # its values are still the declared type's: checked on
                log.add("schema", f"{problem}: the manifest or the shard was edited", shard=name)
            continue
        inner = got.value_type if pa.types.is_list(got) else None
        fixed = inner is not None and pa.types.is_fixed_size_list(inner)
        got_w = inner.list_size if fixed else \
            (1 if inner is not None and not pa.types.is_list(inner) and not pa.types.is_large_list(inner) else None)
        scalar = inner.value_type if fixed else inner
        if got_w != c.width:
            log.add("side_width", f"side column {c.name!r} is {got}: {got_w or 'not a fixed'} value(s) per token, "
                    f"the manifest declares width {c.width}", shard=name, expected=c.width, found=got_w)
        elif fixed != c.row:  # width 1 both: a 1-wide row against one value per token
            log.add("side_width", f"side column {c.name!r} is {got}: {per_token((1,) if fixed else ())}, the "
                    f"manifest declares {per_token(c.row_shape)}", shard=name, expected=per_token(c.row_shape),
                    found=per_token((1,) if fixed else ()))
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
                     row0: int, where: dict, log: ProblemLog, source=None,
                     vocab_size: int | None = None) -> dict[str, int]:
    """The per-row and per-token side column checks of one record batch (rows whose layout
    is broken are left to the layout checks). `source`: (store, per column its index in the
    store or -1, then per compared segment its first position, source row, offset, length and
    index in its slab, then the source rows' namer) for `verify --source` (`compare_side_source`). Returns the NaN / +-inf values of the float
    columns ("side_nan:NAME", "side_inf:NAME"), summed by `verify` and held to the manifest, and
    the slabs left out of a column's checks and counts ("side_unpaired:NAME": a null or a
    length other than T, said once per slab; the batch's other slabs are checked)."""
    odd: dict[str, int] = {}
    T = np.diff(ids_off)
    use = ok_rows[seg_row] & ~fill_seg
    starts = ids_off[seg_row[use]] + seg_start[use]
    real = span_mask(int(ids_off[-1]), starts, seq_lens[use])
    row_of = np.repeat(np.arange(T.size), T)
    for ci, c in enumerate(side):
        col = batch.column(c.name)
        pair = _pairable(col, c, T, row0, where, log)
        if not pair.all():  # their values are not counted: check_nonfinite cannot hold "fewer" then
            odd[f"side_unpaired:{c.name}"] = int((~pair).sum())
        if not pair.any():
            continue
        vals = _values(col, c, T, ids_off, pair)
        keep = np.repeat(pair, T)  # the positions whose values are the slab's own
        if not c.is_int:
            odd[f"side_nan:{c.name}"], odd[f"side_inf:{c.name}"] = nonfinite(vals if pair.all() else vals[keep])
        if source is not None and source[1][ci] >= 0:
            store, index, pos, src_row, src_off, length, seg_in_row, rows_of = source
            if not pair.all():
                mine = pair[row_of[pos]]
                pos, src_row, src_off, length, seg_in_row = (a[mine] for a in (pos, src_row, src_off, length,
                                                                                 seg_in_row))
            compare_side_source(vals, c, store, index[ci], pos, src_row, src_off, length, row_of, ids_off,
                                seg_in_row, row0, where, log, rows_of)
        rows_ok = np.repeat(ok_rows & pair, T)
        # bit for bit, as the writer puts the fill: -0.0 (or a NaN) on a pad is not the fill 0.0
        isz = f"i{vals.dtype.itemsize}"
        bits = np.ascontiguousarray(vals).view(isz)
        off_fill = ~real & rows_ok & (bits != np.asarray(c.fill, vals.dtype).view(isz)).any(axis=1)
        hit = np.flatnonzero(off_fill)
        for p in hit[np.flatnonzero(np.diff(np.concatenate(([-1], row_of[hit]))))][:20]:
            r = int(row_of[p])
            log.add("side_fill", f"side column {c.name!r} holds {side_value(vals[p], c.row)} "
                    f"at pad position {int(p - ids_off[r])}; every pad holds the fill {c.fill}",
                    row=row0 + r, expected=c.fill, **where)
        if c.is_support:
            first = first_breaks(vals, ids, real & keep, np.asarray(loss, np.uint8), vocab_size)
            if (first >= 0).any():
                for k in np.flatnonzero(first >= 0):
                    p = int(first[k])
                    r = int(row_of[p])
                    log.add("side_support", f"side column {c.name!r}, position {int(p - ids_off[r])} (token "
                            f"{int(ids[p])}) holds {vals[p].tolist()}: {broken(k, vals[p], vocab_size)}", row=row0 + r,
                            found=vals[p].tolist(), **where)
    return odd


def _pairable(col: pa.Array, c: SideColumn, T: np.ndarray, row0: int, where: dict, log: ProblemLog) -> np.ndarray:
    """Per row, whether side column `c`'s values pair with the slab's positions: no null
    (`side_null`) and T of them (`side_length`), each said once per row. The other rows are
    left out of this column's checks and counts alone, not the batch's other rows."""
    nulls = null_rows(col) if first_null(col) >= 0 else np.zeros(T.size, bool)
    for r in np.flatnonzero(nulls):  # a null row, a null token's value or one of its K values
        log.add("side_null", f"side column {c.name!r} holds a null value; a token without a value holds the "
                f"fill {c.fill}", row=row0 + int(r), **where)
    n = np.diff(col.offsets.to_numpy().astype(np.int64))
    short = (n != T) & ~nulls
    for r in np.flatnonzero(short)[:5]:
        log.add("side_length", f"side column {c.name!r} has {int(n[r])} entries, the slab has T={int(T[r])} "
                f"tokens", row=row0 + int(r), expected=int(T[r]), found=int(n[r]), **where)
    return ~(nulls | short)


def _values(col: pa.Array, c: SideColumn, T: np.ndarray, ids_off: np.ndarray, pair: np.ndarray) -> np.ndarray:
    """Side column `c` of a batch as (positions, width), position for position with the slabs'
    tokens; the rows not `pair`ed hold 0 there (their values cannot be placed)."""
    offs = col.offsets.to_numpy().astype(np.int64)
    flat = col.values.slice(int(offs[0]), int(offs[-1] - offs[0]))
    if c.row:
        flat = flat.values.slice(flat.offset * c.width, len(flat) * c.width)
    if flat.null_count:  # in rows left out; an int column with a null would read back as floats
        flat = pc.fill_null(flat, pa.scalar(0, flat.type))
    vals = flat.to_numpy(zero_copy_only=False).reshape(-1, c.width)
    if pair.all():
        return vals
    rows = np.flatnonzero(pair)
    lens = T[rows]
    within = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
    out = np.zeros((int(ids_off[-1]), c.width), vals.dtype)
    out[np.repeat(ids_off[rows], lens) + within] = vals[np.repeat(offs[rows] - offs[0], lens) + within]
    return out


def side_value(v: np.ndarray, row: bool):
    """One token's side value(s) as Python numbers that print as their own dtype does: a
    float32 as its shortest float32 repr (-0.1, not -0.10000000149011612), in text and JSON."""
    if v.dtype == np.float32:
        out = [float(str(x)) for x in v]  # numpy's str of a float32 is its shortest round-trip form
    else:
        out = v.tolist()
    return out if row else out[0]


def check_nonfinite(stats: dict, side, totals: dict, policy: str, log: ProblemLog, notes: list[str]) -> None:
    """NaN / +-inf values of the float side columns, counted in the slabs, against the
    manifest's `stats.side_nan` / `side_inf` (what pack read from the input). Values the input
    held are legal (pack keeps values as read) but said in a note, so that they are never
    missed; a count the input does not explain is a problem: more than the input held, or
    fewer where no token was dropped (only --overflow truncate drops tokens)."""
    for c in side:
        if c.is_int:
            continue
        got = {k: int(totals.get(f"side_{k}:{c.name}", 0)) for k in ("nan", "inf")}
        unpaired = int(totals.get(f"side_unpaired:{c.name}", 0))  # slabs whose values were not counted
        said = {k: (stats.get(f"side_{k}") or {}).get(c.name) for k in ("nan", "inf")}
        for k, what in (("nan", "NaN"), ("inf", "+-inf")):
            want = said[k]
            if want is None:
                continue  # an output packed before the count (or by hand): nothing to hold it to
            if got[k] > want or (got[k] < want and policy != "truncate" and not unpaired):
                log.add("side_nonfinite", f"side column {c.name!r} holds {got[k]:,} {what} value(s) in the slabs, "
                        f"the input held {want:,} (the manifest's stats.side_{k}): values changed after pack",
                        expected=want, found=got[k])
        if unpaired and any(said.values()):
            notes.append(f"side column {c.name}: {unpaired} slab(s) whose values could not be placed (the side_null "
                         f"and side_length problems) are left out of its NaN / +-inf count, so a count below the "
                         f"manifest's stats was not held to it")
        # the input's own values alone (what pack warned of): a count beyond it is the problem above
        kept = {k: min(got[k], said[k]) if said[k] is not None else got[k] for k in got}
        if kept["nan"] or kept["inf"]:
            notes.append(f"side column {c.name} holds {kept['nan']:,} NaN and {kept['inf']:,} +-inf value(s) kept "
                         f"from the input as read (pack warned and names the first): a NaN log-prob makes a PPO "
                         f"loss NaN; fix them in the input or mask their tokens")


def source_side_columns(source_dir: str, side, log: ProblemLog, notes: list[str]) -> tuple[tuple, tuple[int, ...]]:
    """The side columns of the tokenized source (its cache.json beside the flat store), and
    per manifest column its index there (-1: not compared, a note or a problem says why)."""
    from packtool.side import side_columns_from_manifest
    from packtool.tokenize.cache_entry import read_cache_json
    root = os.path.dirname(os.path.normpath(source_dir))
    meta = read_cache_json(root) if os.path.exists(os.path.join(root, "cache.json")) else {}
    have = side_columns_from_manifest(meta.get("side_columns"), os.path.join(root, "cache.json"))
    at = {c.name: k for k, c in enumerate(have)}
    index, missing = [], []
    for c in side:
        k = at.get(c.name, -1)
        if k < 0:
            missing.append(c.name)
        elif (have[k].dtype, have[k].row_shape) != (c.dtype, c.row_shape):
            mine, theirs = (f"{x.dtype}, {per_token(x.row_shape)}" for x in (c, have[k]))
            log.add("source_side", f"side column {c.name!r} is {mine} in the output, {theirs} in the source: not "
                    f"the inputs or side columns of the pack", expected=theirs, found=mine)
            k = -1
        index.append(k)
    if missing:
        notes.append(f"the tokenized source holds no side column {', '.join(missing)}: their values were not "
                     f"compared with the source (verify takes the pack's side columns from the manifest)")
    return have, tuple(index)


def compare_side_source(vals: np.ndarray, c: SideColumn, src, k: int, pos: np.ndarray, src_row: np.ndarray,
                        src_off: np.ndarray, length: np.ndarray, row_of: np.ndarray, ids_off: np.ndarray,
                        seg_in_row: np.ndarray, row0: int, where: dict, log: ProblemLog, rows_of=None) -> None:
    """Side column `c` of a record batch (`vals`: (positions, width)) against the source:
    the expected values are gathered from the tokenized source (store `src`, its column `k`)
    with the same (source row, offset, length) per segment as pack's writer, into a copy of
    the slab's values, and compared bit for bit (a NaN equals the same NaN, -0.0 is not 0.0).
    `pos`: each compared segment's first position in the batch. Pads are the fill check's.
    `rows_of` (tokenize/source_rows.SourceRows) names the source row by its file and row."""
    from packtool.slabs.gather import gather_side, side_bits
    expected = np.array(vals, c.np_dtype, order="C")
    gather_side(src, k, src.offsets, src_row, src_off, length, pos, expected)
    got_b, want_b = side_bits(np.ascontiguousarray(vals)), side_bits(expected)
    diff = np.flatnonzero((got_b != want_b).any(axis=1))
    if not diff.size:
        return
    seg = np.searchsorted(pos, diff, side="right") - 1
    rows = row_of[diff]
    firsts = np.flatnonzero(np.concatenate(([True], rows[1:] != rows[:-1])))
    per_row = np.diff(np.append(firsts, diff.size))
    for f, n in zip(firsts, per_row):
        p, i, r = int(diff[f]), int(seg[f]), int(rows[f])
        one = lambda a: side_value(a[p], c.row)  # noqa: E731
        more = f" ({int(n)} such positions in this slab)" if n > 1 else ""
        src, at = describe_row(rows_of, int(src_row[i]))
        log.add("source_side", f"side column {c.name!r} differs from the source: position {p - int(ids_off[r])} "
                f"(segment {int(seg_in_row[i])}, {src}, token {int(src_off[i]) + p - int(pos[i])}) "
                f"holds {one(vals)!r}, the source has {one(expected)!r}{more}", row=row0 + r,
                segment=int(seg_in_row[i]), expected=one(expected), found=one(vals), **at, **where)
