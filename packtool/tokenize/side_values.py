"""Per-token side columns of pre-tokenized rows (issue 21; FORMAT.md "Side columns").

A side column is a list per row: one number per token (width 1), or one K-long list per
token (a list of lists, or a list of fixed_size_list<K>: width K). Its row length must equal
the row's `input_ids` length; a mismatch is one line naming the file, the row and the column.
A null (a null row, a null token list, a null value) is refused the same way: filled silently
it would train on a made-up value (a 0.0 log-prob is a ratio of exp(lp)); a token without a
value is written as the fill explicitly. Rows the tokenizer skips (`--on-empty skip`) are not
held to this. NaN and +-inf in float columns are kept as they are and counted
(`nonfinite`), never silently: pack reports them, the manifest records them, verify and
inspect count them again.

The dtype is the input's (floats: float32, or float64 for doubles; integers and booleans:
int32, or int64 for 64-bit and uint32 inputs) unless pinned as `NAME:DTYPE`; the width comes
from the type (fixed_size_list) or from the first token list seen. Both are fixed by the first
batch that holds the column, and every later batch (and input file) is cast to them: a value
the cast would change (an int out of range, a fraction into an int column, doubles into a
float32 column that was not pinned, a finite float that would become +-inf, an integer the
float dtype holds only rounded) is refused, never rounded silently, in one line naming the
pin that holds the values and, for an inferred dtype, the earlier rows it was inferred from
(S45B-2: the user never saw it). Rounding a double to float32 is what pinning float32 asks
for: the one change kept. So the NaN / +-inf counted are the input's own.

Columnar throughout: Arrow buffers to numpy (packtool/arrays.py) and one compiled copy of
runs; no Python loop over rows.
"""
from __future__ import annotations

import numba as nb
import numpy as np
import pyarrow as pa

from packtool.arrays import list_view_said, np_of
from packtool.errors import PacktoolInputError, arg, cli_flag
from packtool.side import DTYPES, SideColumn, nonfinite
from packtool.tokenize.side_casts import outside, refuse_changed, wider

__all__ = ["SIDE_VALUES", "SideReader"]

# What a cache's side values have been held to: 2 = nulls refused, non-finite floats counted
# in cache.json; 3 = a boolean column refused unless pinned (it became int32 silently). In the
# cache key, so a cache built under the earlier rules is not reused. 4 = a cast that would
# change a value (finite -> inf, an integer rounded, 2^63 wrapped) refused (S31-21). 5 = support
# candidates held to the vocabulary and distinct, as the scorer holds them (S42-1).
SIDE_VALUES = 5


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _natural_dtype(t: pa.DataType) -> str | None:
    if pa.types.is_floating(t):
        return "float64" if t.bit_width == 64 else "float32"
    if pa.types.is_boolean(t):
        return "bool"  # not a side dtype: kept only when pinned (FORMAT.md, Side columns)
    if pa.types.is_integer(t):
        wide = t.bit_width == 64 or (pa.types.is_unsigned_integer(t) and t.bit_width == 32)
        return "int64" if wide else "int32"
    return None


@nb.njit(nogil=True, cache=True)
def _copy_runs(src, src_start, dst_start, count, out):
    for i in range(count.size):
        s, d = src_start[i], dst_start[i]
        for j in range(count[i]):
            out[d + j] = src[s + j]


def _list_offsets(a: pa.Array) -> np.ndarray:
    if pa.types.is_fixed_size_list(a.type):
        k = a.type.list_size
        return (np.arange(len(a) + 1, dtype=np.int64) + a.offset) * k
    return np_of(a.offsets).astype(np.int64)


def _valid(a: pa.Array) -> np.ndarray | None:
    """Validity per entry (None: no nulls)."""
    if not a.null_count:
        return None
    return np.asarray(a.is_valid().to_numpy(zero_copy_only=False), bool)


class SideReader:
    """Takes the side columns out of each batch of one pack's pre-tokenized inputs; resolves
    each column's dtype and width from the first batch that holds it, then keeps them."""

    def __init__(self, spec) -> None:
        self.spec = tuple(spec)
        self.columns: list[SideColumn | None] = [None] * len(self.spec)
        self._typed_at: list[str | None] = [None] * len(self.spec)  # the rows that fixed each dtype
        self._dropped: np.ndarray | None = None  # rows of the batch in `take` that are skipped
        self.nonfinite: dict[str, dict] = {}  # column -> NaN / inf counts and the first (cache.json)

    def count_nonfinite(self, sides: list[np.ndarray], lens: np.ndarray, path: str, file_rows: np.ndarray) -> None:
        """Counts the NaN / +-inf values of the float columns among `sides` (the kept rows'
        values; `file_rows` those rows' numbers in `path`), keeping the first one's place."""
        for c, v in zip(self.columns, sides):
            if c is None or c.is_int:
                continue
            nan, inf = nonfinite(v)
            if not nan + inf:
                continue
            e = self.nonfinite.setdefault(c.name, {"nan": 0, "inf": 0})
            e["nan"] += nan
            e["inf"] += inf
            if "first" not in e:
                q = int(np.flatnonzero(~np.isfinite(v))[0])
                starts = np.cumsum(lens) - lens
                r = int(np.searchsorted(starts, q // c.width, side="right")) - 1
                e["first"] = {"file": path, "row": int(file_rows[r]), "token": q // c.width - int(starts[r]),
                              "value": str(float(v[q]))}

    @property
    def names(self) -> list[str]:
        return [s[0] for s in self.spec]

    def resolved(self) -> tuple[SideColumn, ...]:
        return tuple(c for c in self.columns if c is not None)

    def take(self, batch: pa.RecordBatch, lens: np.ndarray, path: str, first_row: int,
             ids: np.ndarray | None = None, mask: np.ndarray | None = None,
             dropped: np.ndarray | None = None, vocab_size: int | None = None) -> list[np.ndarray]:
        """Per side column, its values for every token of the batch's rows, flat (T * width,
        the column's dtype). A null in a row not `dropped` (bool per row: rows the tokenizer
        skips) is refused. With the rows' `ids` (and loss `mask`, None: every token a target),
        support columns are held to the support rule, their ids to `vocab_size` (the
        tokenizer's; None: FORMAT.md's 2^31) as input_ids are."""
        self._dropped = None if dropped is None or not np.any(dropped) else np.asarray(dropped, bool)
        out = [self._one(i, batch.column(s[0]), lens, path, first_row) for i, s in enumerate(self.spec)]
        if ids is not None:
            for c, vals in zip(self.columns, out):
                if c is not None and c.is_support:
                    _check_support(c, vals, ids, mask, lens, path, first_row, vocab_size)
        return out

    def _one(self, i: int, col, lens: np.ndarray, path: str, first_row: int) -> np.ndarray:
        name, pinned, kind = self.spec[i]
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        written = col.type  # as the user wrote it: said where the column is refused
        if isinstance(col, pa.ExtensionArray):
            # an extension is read as its storage: datasets' Array2D(shape=(None, K)), its feature
            # for a K-wide row per token, stores the list of K-long lists per row read here
            # (S49B-6: refused as "not a list per row")
            col = col.storage
        t = col.type

        earlier = None  # the earlier rows that fixed an unpinned dtype (not this batch's)

        def bad(msg, row=None, pin=False):
            """`row`: the row in this batch, or (row, token in it); --json gets column and token;
            `pin`: the fix is a dtype in side_columns (or the flag named), whose flag --json names;
            a dtype inferred from earlier rows (another file, an earlier JSON block: rows the user
            may never have looked at) is said to be so."""
            if pin is True and earlier:
                msg += f" (its dtype was inferred from {earlier})"
            row, token = row if isinstance(row, tuple) else (row, None)
            details = {"column": name} if token is None else {"column": name, "token": int(token)}
            return PacktoolInputError(f"side column {name}: {msg}", path=path, details=details,
                                      row=None if row is None else first_row + int(row),
                                      flag=cli_flag(pin if isinstance(pin, str) else "side_columns") if pin else None)

        if list_view_said(t):
            raise bad(f"holds {t}: {list_view_said(t)}", 0)
        if not _is_list(t):
            raise bad(f"holds {written}, not a list per row (one value, or one K-long list, per token)", 0)
        inner = t.value_type
        nested = _is_list(inner)
        scalar_t = inner.value_type if nested else inner
        natural = _natural_dtype(scalar_t) or ("null" if pa.types.is_null(scalar_t) else None)
        if natural is None:
            raise bad(f"holds {t}: values must be numbers (float or int)", 0)
        if natural == "bool" and pinned is None:  # True/False as 1/0 said, never silent
            raise bad(f"holds booleans ({t}), which no side dtype ({', '.join(DTYPES)}) holds as they are: "
                      f"to keep them as 1/0 give the column as {name}:int32 in {arg('side_columns')}, or "
                      f"cast it to numbers in the input", 0, pin=True)
        offs = _list_offsets(col)
        tok = col.values.slice(int(offs[0]), int(offs[-1] - offs[0]))  # the rows' tokens
        rel = offs - offs[0]
        lens = np.asarray(lens, np.int64)
        row_ok = _valid(col)
        if row_ok is not None:
            self._refuse_null(np.flatnonzero(~row_ok & (lens > 0)), None, name, bad)
        if nested and self.columns[i] is None:  # before the null check: `[]` per token is no null
            flag = "support_columns" if kind == "support" else "side_columns"
            self._refuse_zero_width(inner, tok, rel, name, flag, bad)
        if natural == "null":
            self._refuse_null(np.arange(len(tok)), rel, name, bad, "the value")
        c = self.columns[i]
        if c is None:
            width = 1
            if nested:
                width = inner.list_size if pa.types.is_fixed_size_list(inner) else self._first_width(tok)
                if width is None:
                    raise bad("holds no token list yet to tell its width K; write it as a "
                              "fixed_size_list<K> per token")
            if natural == "null" and pinned is None:
                raise bad(f"holds no values, so its type is unknown: give it as {name}:DTYPE in "
                          f"{arg('side_columns')} (DTYPE one of {', '.join(DTYPES)})", pin=True)
            # a list per token is a row, K = 1 too: the width alone cannot say a 1-wide row (S42-7)
            c = self.columns[i] = SideColumn(name, pinned or natural, width, kind=kind, row=nested)
            self._typed_at[i] = f"{path}, rows from {first_row}"
        elif pinned is None:
            earlier = self._typed_at[i]
        if c.row != nested:  # the column was resolved from an earlier batch or input file
            raise bad(f"is {f'a K={c.width} row' if c.row else 'one value'} per token in earlier rows "
                      f"({self._typed_at[i]}) but {t} here", 0)
        have = np.diff(offs)
        mism = (have != lens) if row_ok is None else ((have != lens) & row_ok)
        if mism.any():
            r = int(np.flatnonzero(mism)[0])
            raise bad(f"has {int(have[r])} values but input_ids has {int(lens[r])} tokens; a side column "
                      f"holds one entry per token", r)
        flat = self._tokens(c, tok, rel, natural, pinned, bad)
        if row_ok is None:
            return np.ascontiguousarray(flat)
        K = c.width
        out = np.full(int(lens.sum()) * K, c.fill, c.np_dtype)  # null rows (of dropped or empty rows)
        dst = np.concatenate(([0], np.cumsum(lens)))[:-1]
        _copy_runs(flat, rel[:-1][row_ok] * K, dst[row_ok] * K, lens[row_ok] * K, out)
        return out

    @staticmethod
    def _refuse_zero_width(inner: pa.DataType, tok: pa.Array, rel: np.ndarray, name: str, flag: str, bad) -> None:
        """K is the fixed_size_list's size or the first token list's length: K=0 is a column of no
        values, which no kernel reads (they refuse it) and no manifest declares (width >= 1)."""
        if pa.types.is_fixed_size_list(inner):
            if inner.list_size or not len(tok):
                return
            pos = 0
        else:
            n = np.diff(_list_offsets(tok))
            ok = _valid(tok)
            first = np.flatnonzero(ok) if ok is not None else np.arange(min(n.size, 1))
            if not first.size or n[first[0]]:
                return
            pos = int(first[0])
        r = int(np.searchsorted(rel, pos, side="right")) - 1
        raise bad(f"token {pos - int(rel[r])} holds 0 values; a K-wide row needs K >= 1 (rows and tokens count "
                  f"from 0): give every token K >= 1 values, or drop {name} from {arg(flag)}", (r, pos - int(rel[r])), pin=flag)

    @staticmethod
    def _first_width(tok: pa.Array) -> int | None:
        n = np.diff(_list_offsets(tok))
        ok = _valid(tok)
        n = n if ok is None else n[ok]
        return int(n[0]) if n.size else None

    def _tokens(self, c: SideColumn, tok: pa.Array, rel: np.ndarray, natural: str, pinned, bad) -> np.ndarray:
        """The values of the tokens in `tok` (rows at `rel`), flat: len(tok) * width."""
        K = c.width
        if not c.row:
            self._null_values(tok, rel, c.name, bad)
            return self._numbers(tok, c, natural, pinned, bad, rel)
        io = _list_offsets(tok)
        tok_ok = _valid(tok)
        if tok_ok is not None:
            self._refuse_null(np.flatnonzero(~tok_ok), rel, c.name, bad, "the value list")
        n = np.diff(io)
        wrong = (n != K) if tok_ok is None else ((n != K) & tok_ok)
        if wrong.any():
            pos = int(np.flatnonzero(wrong)[0])
            r = int(np.searchsorted(rel, pos, side="right")) - 1
            raise bad(f"token {pos - int(rel[r])} holds {int(n[pos])} values, not {K}; every token's "
                      f"list is K={K} long (pad its end with the fill)", (r, pos - int(rel[r])))
        ev = tok.values.slice(int(io[0]), int(io[-1] - io[0]))
        self._null_values(ev, rel, c.name, bad, io - io[0])
        flat = self._numbers(ev, c, natural, pinned, bad, rel, io - io[0])
        if tok_ok is None:
            return flat
        full = np.full(len(tok) * K, c.fill, c.np_dtype)  # a null token list: the fill
        starts = (io[:-1] - io[0])[tok_ok]
        _copy_runs(flat, starts, np.flatnonzero(tok_ok).astype(np.int64) * K,
                   np.full(starts.size, K, np.int64), full)
        return full

    def _null_values(self, vals: pa.Array, rel: np.ndarray, name: str, bad, elem_offs=None) -> None:
        """A null value (of a row not dropped) refused; `elem_offs`: where each token's values
        start in `vals` (K-wide columns; None: one value per token)."""
        if not vals.null_count or pa.types.is_null(vals.type):
            return
        hit = np.flatnonzero(~_valid(vals))
        tok = hit if elem_offs is None else np.searchsorted(elem_offs, hit, side="right") - 1
        self._refuse_null(tok, rel, name, bad, "the value" if elem_offs is None else "a value")

    def _refuse_null(self, hit: np.ndarray, rel: np.ndarray | None, name: str, bad, what: str = "the row") -> None:
        """`hit`: null rows (rel None) or tokens of the rows at `rel`, ascending; the first one
        outside the dropped rows is one line naming the row (and the token)."""
        if not hit.size:
            return
        rows = hit if rel is None else np.searchsorted(rel, hit, side="right") - 1
        if self._dropped is not None:
            keep = ~self._dropped[rows]
            hit, rows = hit[keep], rows[keep]
        if not hit.size:
            return
        r = int(rows[0])
        at = "the row is" if rel is None else f"{what} of token {int(hit[0] - rel[r])} is"
        raise bad(f"{at} null; packtool does not fill nulls (that would train on a made-up value): write "
                  f"every token's value, the column's fill for a token that has none (rows and tokens count "
                  f"from 0)", r if rel is None else (r, int(hit[0] - rel[r])))

    @staticmethod
    def _numbers(vals: pa.Array, c: SideColumn, natural: str, pinned, bad, row_offs, elem_offs=None) -> np.ndarray:
        """The values as c's dtype, null values as the fill. `row_offs`: where each row's tokens
        start; `elem_offs`: where each token's values start (K-wide columns; None: one each)."""
        ok = _valid(vals)
        if pa.types.is_null(vals.type):
            return np.full(len(vals), c.fill, c.np_dtype)
        x = SideReader._cast(vals, ok, c, natural, pinned, bad, row_offs, elem_offs)
        if ok is not None:
            x = np.where(ok, x, np.asarray(c.fill, c.np_dtype))
        return x

    @staticmethod
    def _cast(vals: pa.Array, ok, c: SideColumn, natural: str, pinned, bad, row_offs, elem_offs=None) -> np.ndarray:
        if pa.types.is_boolean(vals.type):
            x = np.asarray(vals.to_numpy(zero_copy_only=False), bool).astype(np.int32)
        else:
            x = np_of(vals) if ok is None else np_of(vals.fill_null(0))
        want = c.np_dtype

        def where(pos):  # (row, token in it) of value `pos`
            tok = pos if elem_offs is None else int(np.searchsorted(elem_offs, pos, side="right")) - 1
            r = int(np.searchsorted(row_offs, tok, side="right")) - 1
            return r, tok - int(row_offs[r])

        if x.dtype == want:
            return x
        if want.kind == "f":
            if natural == "float64" and want == np.float32 and pinned is None:
                raise bad(f"holds doubles here but float32 values in earlier rows; pin the type: "
                          f"{c.name}:float32 or {c.name}:float64 in {arg('side_columns')}", pin=True)
            with np.errstate(over="ignore"):  # an overflow to inf is refused just below
                y = x.astype(want)
            refuse_changed(x, y, ok, c, bad, where)
            return y
        if x.dtype.kind == "f":
            frac = ~np.isfinite(x) | (x != np.floor(x))
            if ok is not None:
                frac &= ok
            if frac.any():
                pos = int(np.flatnonzero(frac)[0])
                at = where(pos)
                fl = natural if natural in ("float32", "float64") else "float64"  # the values' own float type
                raise bad(f"token {at[1]} holds {float(x[pos])!r} in an {c.dtype} column (not truncated): "
                          f"give the column as {c.name}:{fl} in {arg('side_columns')}", at, pin=True)
        out_of = outside(x, want)
        if ok is not None:
            out_of &= ok
        if out_of.any():
            pos = int(np.flatnonzero(out_of)[0])
            at = where(pos)
            v = int(x[pos])
            raise bad(f"token {at[1]} holds {v} outside {c.dtype}; {wider(v, c.name)}", at, pin=True)
        return x.astype(want)


def _check_support(c: SideColumn, vals: np.ndarray, ids: np.ndarray, mask, lens, path: str,
                   first_row: int, vocab_size: int | None) -> None:
    """The first token of these rows that breaks the support rule: one line naming the row
    and the token, before anything is written."""
    from packtool.support_rule import broken, first_breaks
    lens = np.asarray(lens, np.int64)
    starts = np.concatenate(([0], np.cumsum(lens)))[:-1]
    loss = np.ones(ids.size, np.uint8) if mask is None else np.asarray(mask, np.uint8).copy()
    loss[starts[lens > 0]] = 0  # a row's first token is never a target
    first = first_breaks(vals.reshape(-1, c.width), ids, np.ones(ids.size, bool), loss, vocab_size)
    if (first < 0).all():
        return
    k = int(np.argmin(np.where(first >= 0, first, np.iinfo(np.int64).max)))
    p = int(first[k])
    r = int(np.searchsorted(starts, p, side="right")) - 1
    raise PacktoolInputError(f"side column {c.name}: token {p - int(starts[r])} (id {int(ids[p])}) holds "
                             f"{vals.reshape(-1, c.width)[p].tolist()}: {broken(k, vals.reshape(-1, c.width)[p], vocab_size)} "
                             f"(rows and tokens count from 0)",
                             path=path, row=first_row + r, flag=cli_flag("support_columns"),
                             details={"column": c.name, "token": p - int(starts[r])})
