"""Per-token side columns (issue 21): the one description of a value that travels with the
tokens through the layout: rollout log-probs, advantages, loss weights, the sampler's
candidate ids. The tool does not know the list; a user names the columns.

A `SideColumn` says what every reader needs to place and check the values: the numpy dtype,
the width (1 = one scalar per token, K = a fixed-width row per token; `row` says a width of 1
is a 1-wide row, [T, 1], not one value per token, [T]: the support of greedy sampling), the
fill held by pads and by tokens that have no value, and the kind. Kind "support" declares an int column whose
rows follow the sampler-support rule (FORMAT.md, "Side columns"; packtool/support_rule.py):
-1 padded at the end, distinct token ids, and for a token that has a row, the token id
present in it exactly once. The declaration is
explicit (`pack --support-columns`, `TokenizeConfig.support_columns`); a name never makes a
column a support column.

Base module: numpy and packtool.errors only, so that every stage and consumer can use it.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from packtool.errors import PacktoolFormatError, PacktoolInputError, arg, cli_flag

__all__ = ["DTYPES", "KINDS", "RESERVED", "SideColumn", "check_side_columns", "name_problem", "shift_clash", "nonfinite", "side_columns_from_manifest",
           "side_columns_to_manifest", "parse_names",
           "parse_side_spec", "per_token", "side_values"]

DTYPES = ("float32", "float64", "int32", "int64")
KINDS = ("values", "support")
# The slab format's own columns (slabs/schema.SCHEMA; a test checks the two agree) and the keys
# the consumers' batches already carry: a side column of one of these names would shadow it.
RESERVED = frozenset((
    "input_ids", "loss_mask", "seq_lens", "cu_seqlens", "cu_seqlens_padded", "cp_offsets", "source_index",
    "chunk_index", "source_offset", "num_tokens", "num_loss_tokens", "layout_pad", "tail_pad", "fill_pad",
    "singleton", "slab_index", "dp_rank", "step", "microbatch",
    "labels", "position_ids", "attention_mask", "tokens", "max_seqlen", "text", "prompt", "response", "messages",
))
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}\Z")  # a Parquet column, a batch key and a CLI list item


def name_problem(name) -> str | None:
    """Why `name` cannot name a side column (None when it can): the one rule for
    `pack --side-columns`, SideColumn and `packtool.online`'s `side=` keys, so that rollouts
    packed online can be saved through `pack` under the same names."""
    if not isinstance(name, str):
        return f"a name is a str of letters, digits and _, not {type(name).__name__}"
    if not _NAME.match(name):
        return "a name is letters, digits and _ (not starting with a digit, at most 128 characters)"
    if name in RESERVED:
        return "the name is one of packtool's own columns or batch keys; rename the column"
    return None


def shift_clash(names) -> tuple[str, str] | None:
    """(name, why) for a name of `names` that is another's shift_NAME, None when none is: every
    batch carries NAME shifted like labels as shift_NAME (SlabCollator's key, the dict a trainer
    makes of a ThdBatch's side and side_targets), so the pair would overwrite one with the other.
    The one pair rule for `pack --side-columns` and `packtool.online`'s `side=` keys."""
    given = [n for n in names if isinstance(n, str)]
    have = set(given)
    clash = next((n for n in given if n.startswith("shift_") and n[6:] in have), None)
    if clash is None:
        return None
    return clash, f"{clash!r} is the name every batch gives {clash[6:]!r} shifted like labels; rename the column"


@dataclass(frozen=True)
class SideColumn:
    """One per-token side column. `fill=None` means the default: 0.0 for floats, -1 for ints.
    `row=None` means the width's: a row per token for K > 1, one value for K = 1; `row=True`
    with width 1 is a 1-wide row per token (S42-7: a K=1 input column had no declaration)."""

    name: str
    dtype: str
    width: int = 1
    fill: float | int | None = None
    kind: str = "values"
    row: bool | None = None

    def __post_init__(self) -> None:
        where = f"side column {self.name!r}"
        why = name_problem(self.name)
        if why:
            raise PacktoolInputError(f"{where}: {why}", flag=cli_flag("side_columns"))
        if self.dtype not in DTYPES:
            raise PacktoolInputError(f"{where}: dtype {self.dtype!r} is not one of {', '.join(DTYPES)}; "
                                     f"cast the input column", flag=cli_flag("side_columns"))
        if isinstance(self.width, bool) or not isinstance(self.width, (int, np.integer)) or self.width < 1:
            raise PacktoolInputError(f"{where}: width {self.width!r} is not a positive integer",
                                     flag=cli_flag("side_columns"))
        object.__setattr__(self, "width", int(self.width))
        if self.row is None:
            object.__setattr__(self, "row", self.width > 1)
        if not isinstance(self.row, (bool, np.bool_)) or (self.width > 1 and not self.row):
            raise PacktoolInputError(f"{where}: row {self.row!r} is not True, or False with width 1 (a width "
                                     f"{self.width} column holds a row per token)", flag=cli_flag("side_columns"))
        object.__setattr__(self, "row", bool(self.row))
        if self.kind not in KINDS:
            raise PacktoolInputError(f"{where}: kind {self.kind!r} is not one of {', '.join(KINDS)}",
                                     flag=cli_flag("support_columns"))
        object.__setattr__(self, "fill", self._checked_fill(where))
        if self.kind == "support" and (not self.is_int or self.fill != -1):
            raise PacktoolInputError(f"{where}: a support column holds int32/int64 candidate ids with fill -1 "
                                     f"(got {self.dtype}, fill {self.fill!r})", flag=cli_flag("support_columns"))

    def _checked_fill(self, where: str) -> float | int:
        fill = self.fill
        if fill is None:
            return -1 if self.is_int else 0.0
        if isinstance(fill, bool) or not isinstance(fill, (int, float, np.integer, np.floating)):
            raise PacktoolInputError(f"{where}: fill {fill!r} is not a number", flag=cli_flag("side_columns"))
        if not math.isfinite(float(fill)):
            raise PacktoolInputError(f"{where}: fill {fill!r} is not finite (the manifest is plain JSON)",
                                     flag=cli_flag("side_columns"))
        if self.is_int:
            info = np.iinfo(self.dtype)
            if float(fill) != int(fill) or not info.min <= int(fill) <= info.max:
                raise PacktoolInputError(f"{where}: fill {fill!r} is not an {self.dtype}", flag=cli_flag("side_columns"))
            return int(fill)
        return float(fill)

    @property
    def is_int(self) -> bool:
        return self.dtype.startswith("int")

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    @property
    def is_support(self) -> bool:
        return self.kind == "support"

    @property
    def row_shape(self) -> tuple:
        """One token's values: () one value, (K,) a K-wide row (K = 1 included)."""
        return (self.width,) if self.row else ()

    def to_dict(self) -> dict:
        """The manifest entry (FORMAT.md, "Side columns"): `row` only where the width does not
        say it (a 1-wide row), so every other entry is as before."""
        d = {"name": self.name, "dtype": self.dtype, "width": self.width, "fill": self.fill, "kind": self.kind}
        return {**d, "row": True} if self.row and self.width == 1 else d

    @classmethod
    def from_dict(cls, d: object, where: str = "manifest") -> "SideColumn":
        """A manifest entry back; anything malformed is a one-line PacktoolFormatError."""
        if not isinstance(d, dict) or not isinstance(d.get("name"), str):
            raise PacktoolFormatError(f"{where}: side_columns entry {d!r} is not an object with a name; "
                                      f"the manifest is edited or damaged: re-run `packtool pack`")
        try:
            col = cls(name=d["name"], dtype=d.get("dtype"), width=d.get("width", 1), fill=d.get("fill"),
                      kind=d.get("kind", "values"), row=d.get("row"))
        except PacktoolInputError as e:
            what = re.sub(r" \(see --[a-z-]+\)$", "", str(e))  # a manifest has no flags to name
            raise PacktoolFormatError(f"{where}: side_columns: {what}; the manifest is edited or damaged") from None
        # a stored output holds FORMAT.md's fill, which pack always writes: another (pads rewritten
        # to match) would be shifted into every target-aligned batch as a made-up value; bit for
        # bit, as pads are held, so -0.0 is not 0.0
        want = cls(col.name, col.dtype, col.width, kind=col.kind, row=col.row).fill
        bits = f"i{col.np_dtype.itemsize}"
        if np.asarray(col.fill, col.np_dtype).view(bits) != np.asarray(want, col.np_dtype).view(bits):
            raise PacktoolFormatError(f"{where}: side_columns: side column {col.name!r} ({col.dtype}) has fill "
                                      f"{col.fill!r}, FORMAT.md's is {want!r} (packtool writes no other); the "
                                      f"manifest is edited or damaged: re-run `packtool pack`")
        # key for key the entry pack writes (`row` only true, only on width 1): a key defaulted or
        # dropped here would pass where FORMAT.md's reader, holding the whole entry to the one its
        # shard's field records, refuses it (S47B-3)
        written = col.to_dict()
        if set(d) != set(written):
            k = sorted(set(d) ^ set(written))[0]
            said = f"has {k!r}: {d[k]!r}" if k in d else f"has no {k!r}"
            raise PacktoolFormatError(f"{where}: side_columns: side column {col.name!r} {said}; packtool writes "
                                      f"{', '.join(written)} (`row` only as true, on a 1-wide row); the manifest "
                                      f"is edited or damaged: re-run `packtool pack`")
        return col

    def filled(self, n: int) -> np.ndarray:
        """n tokens' worth of fill: shape (n,) for one value per token, (n, width) for rows."""
        return np.full((n, *self.row_shape), self.fill, self.np_dtype)


def per_token(row: tuple) -> str:
    """A row shape said: () one value, (K,) a K-wide row (K=1 is a 1-wide row, not a value)."""
    return "one value per token" if row == () else (f"a row of K={row[0]} per token" if len(row) == 1
                                                    else f"rows of shape {row}")


def _rows(values) -> tuple[np.ndarray | None, str | None]:
    """values as one array: a list, an array, or an array of per-token arrays (`datasets`'
    numpy rows); rows of differing widths are named by the first token that differs."""
    try:
        v = np.asarray(values)
        if v.dtype == object and v.ndim == 1 and v.size:
            v = np.stack([np.asarray(x) for x in v])
    except (ValueError, TypeError):  # ragged: rows of different widths
        try:
            sizes = [int(np.size(x)) for x in values]
        except (ValueError, TypeError):
            sizes = []
        t = next((i for i, n in enumerate(sizes) if n != sizes[0]), None)
        if t is None:
            return None, "is not a list of numbers, one or one K-wide row per token"
        return None, f"has rows of differing widths: token 0 holds {sizes[0]} value(s), token {t} holds {sizes[t]}"
    return v, None


def side_values(values, tokens: int | None, col: SideColumn | None = None) -> tuple[np.ndarray | None, str | None]:
    """One slab's (or sequence's) values of a side column held to its declaration `col`:
    `tokens` rows shaped as `col.filled` gives them, numbers of `col.dtype`. (the values as
    col.dtype, None), or (None, what differs) for the caller to say where. An int in a float
    column is cast; a float, bool or str in an int column, or an int outside its dtype, is not
    (the cast would make another id). col=None (a column known by name only): `tokens` rows of
    one number or one fixed-width row each, kept as given. tokens=None: any number of rows."""
    v, why = _rows(values)
    if why:
        return None, why
    if v.ndim == 0:
        return None, f"is {_short(v.item())}, not a list with one row per token"
    if tokens is not None and v.shape[0] != tokens:
        return None, f"holds {v.shape[0]} rows for {tokens} tokens (input_ids): one row per token"
    want = None if col is None else col.filled(0).shape[1:]
    if want is not None and v.shape[1:] != want:
        return None, (f"has {per_token(v.shape[1:])}, the output declares {per_token(want)} "
                      f"(SideColumn {col.name!r})")
    if v.ndim > 2:
        return None, f"has rows of shape {v.shape[1:]}: one value or one K-wide row per token"
    kinds = "iu" if col is not None and col.is_int else "fiu"
    if v.size and v.dtype.kind not in kinds:
        what = col.dtype if col is not None else "a number"
        return None, f"holds {v.dtype} values ({_short(v.flat[0])} first), the column is {what}"
    if col is None:
        return v, None
    if col.is_int and v.size and not np.can_cast(v.dtype, col.np_dtype):
        info = np.iinfo(col.dtype)
        odd = np.flatnonzero((v < info.min) | (v > info.max))
        if odd.size:
            return None, f"holds {int(v.flat[odd[0]])}, outside {col.dtype}"
    return v.astype(col.np_dtype, copy=False), None


def _short(x) -> str:
    r = repr(x.item() if isinstance(x, np.generic) else x)
    return r if len(r) <= 40 else r[:37] + "..."


def check_side_columns(cols) -> tuple[SideColumn, ...]:
    """A tuple of SideColumns with distinct names."""
    cols = tuple(cols or ())
    seen = set()
    for c in cols:
        if not isinstance(c, SideColumn):
            raise PacktoolInputError(f"side columns must be SideColumn, got {type(c).__name__}",
                                     flag=cli_flag("side_columns"))
        if c.name in seen:
            raise PacktoolInputError(f"side column {c.name!r} is named twice", flag=cli_flag("side_columns"))
        seen.add(c.name)
    return cols


def side_columns_to_manifest(cols) -> list[dict]:
    return [c.to_dict() for c in check_side_columns(cols)]


def side_columns_from_manifest(entries: object, where: str = "manifest") -> tuple[SideColumn, ...]:
    """The manifest's or cache.json's `side_columns` (absent or [] = none)."""
    if entries is None:
        return ()
    if not isinstance(entries, list):
        raise PacktoolFormatError(f"{where}: side_columns is not a list; the manifest is edited or damaged: "
                                  f"re-run `packtool pack`")
    cols = tuple(SideColumn.from_dict(e, where) for e in entries)
    try:
        return check_side_columns(cols)
    except PacktoolInputError as e:
        raise PacktoolFormatError(f"{where}: {e}; the manifest is edited or damaged") from None


def parse_names(text: str | None, flag: str = "side_columns") -> tuple[str, ...]:
    """`A,B,C` (spaces ignored) -> ("A", "B", "C"); every name checked, none twice."""
    if text is None:
        return ()
    names = tuple(n.strip() for n in str(text).split(",") if n.strip())
    for n in names:
        name, colon, dtype = n.partition(":")
        if colon and _NAME.match(name) and name not in RESERVED and dtype.strip() in DTYPES:  # the name is fine
            raise PacktoolInputError(f"{arg(flag)}: {n!r} pins a dtype, which {arg(flag)} does not take: pin it "
                                     f"in {arg('side_columns')} ({arg('side_columns', n)} {arg(flag, name)})",
                                     flag=cli_flag(flag))
        if not _NAME.match(n) or n in RESERVED:
            raise PacktoolInputError(f"{arg(flag)}: {n!r} is not a usable side column name (letters, digits, _; "
                                     f"not one of packtool's own columns)", flag=cli_flag(flag))
    if len(set(names)) != len(names):
        raise PacktoolInputError(f"{arg(flag)}: a name is given twice in {text!r}", flag=cli_flag(flag))
    return names


def parse_side_spec(items, support=()) -> tuple[tuple[str, str | None, str], ...]:
    """TokenizeConfig.side_columns ("NAME" or "NAME:DTYPE") and .support_columns -> (name,
    pinned dtype or None, kind) per column; a support column not in the list is added. The
    one reading of the spelling: pack's config and every reader of the manifest's
    `input.tokenize`, which records it as given (verify --source re-tokenizes with it)."""
    out: dict[str, list] = {}
    for item in items or ():
        name, colon, dtype = str(item).partition(":")
        (name,) = parse_names(name) or ("",)
        if colon and not dtype.strip():  # `x:` is a pin left half-typed, not plain `x`
            raise PacktoolInputError(f"{arg('side_columns')}: {item!r}: DTYPE is empty; give NAME (the input's "
                                     f"type) or NAME:DTYPE with DTYPE one of {', '.join(DTYPES)}",
                                     flag=cli_flag("side_columns"))
        dtype = dtype.strip() or None
        if not name or (dtype is not None and dtype not in DTYPES):
            raise PacktoolInputError(f"{arg('side_columns')}: {item!r} is not NAME or NAME:DTYPE (DTYPE one of "
                                     f"{', '.join(DTYPES)})", flag=cli_flag("side_columns"))
        if name in out:
            raise PacktoolInputError(f"{arg('side_columns')}: {name!r} is given twice", flag=cli_flag("side_columns"))
        out[name] = [name, dtype, "values"]
    for name in parse_names(",".join(support or ()), "support_columns"):
        out.setdefault(name, [name, None, "values"])[2] = "support"
    clash = shift_clash(out)
    if clash:  # refused here, not at training
        raise PacktoolInputError(f"{arg('side_columns')}: {clash[1]}", flag=cli_flag("side_columns"))
    return tuple(tuple(e) for e in out.values())


def nonfinite(values: np.ndarray) -> tuple[int, int]:
    """(NaN, +-inf) counts of a side column's values (0, 0 for ints). A float column may hold
    them (pack keeps values as read), but every stage counts them where the user looks: a NaN
    log-prob makes a PPO loss NaN. A sum first, one vectorized pass without a temporary;
    counted only when it is not finite."""
    if values.dtype.kind != "f" or not values.size:
        return 0, 0
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf or an overflowing sum: counted below
        if np.isfinite(values.sum()):
            return 0, 0
    nan = int(np.count_nonzero(np.isnan(values)))
    return nan, int(np.count_nonzero(~np.isfinite(values))) - nan
