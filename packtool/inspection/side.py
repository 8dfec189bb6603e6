"""`inspect` on side columns (FORMAT.md "Side columns"): which columns a packed output carries
and how much of each holds the fill, on all positions and on real tokens (tokens that had no
value in the input: prompt tokens of a support column, say), and how many NaN / +-inf values
a float column holds (kept by pack as read; they make a PPO loss NaN). Counted from the row groups
the reader's checks decode (side columns, seq_lens, cu_seqlens_padded); numpy over the flattened lists."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from packtool.arrays import span_mask
from packtool.side import nonfinite


@dataclass(frozen=True)
class SideColumnReport:
    name: str
    dtype: str
    width: int
    kind: str  # values | support
    fill: float | int
    positions: int  # physical tokens
    fill_positions: int  # positions whose every value is the fill (pads included)
    fill_share: float  # fill_positions / positions
    real_tokens: int
    fill_on_real: int  # real tokens holding the fill: tokens without a value
    fill_on_real_share: float  # fill_on_real / real_tokens
    nan: int = 0  # NaN values (float columns)
    inf: int = 0  # +-inf values (float columns)
    row: bool = False  # a K-wide row per token, [T, K], K = 1 included (FORMAT.md "row"); False: one value, [T]


class SideTally:
    """The side columns' figures, added up row group by row group from the groups the reader's
    checks decode (`slabs.reader.check_rows(each_group=)`): no column is read a second time."""

    def __init__(self, side) -> None:
        self.side = tuple(side)
        self.fill = np.zeros(len(self.side), np.int64)
        self.fill_real = np.zeros(len(self.side), np.int64)
        self.odd = np.zeros((len(self.side), 2), np.int64)  # NaN, +-inf
        self.total = self.real_total = 0

    def add(self, g: dict) -> None:
        """One checked row group: list columns as (values, offsets), side columns under "side"."""
        real = _real_positions(g["seq_lens"], g["cu_seqlens_padded"])
        self.total += real.size
        self.real_total += int(real.sum())
        for k, c in enumerate(self.side):
            v, o = g["side"][c.name]
            vals = v[int(o[0]):int(o[-1])]  # [n] or [n, K]
            self.odd[k] += nonfinite(vals)
            is_fill = (vals.reshape(-1, c.width) == c.fill).all(axis=1)
            self.fill[k] += int(is_fill.sum())
            self.fill_real[k] += int((is_fill & real).sum())

    def reports(self) -> list[SideColumnReport]:
        """One report per side column (none when there are no columns)."""
        share = lambda a, b: float(a) / b if b else 0.0  # noqa: E731
        t, rt = self.total, self.real_total
        return [SideColumnReport(c.name, c.dtype, c.width, c.kind, c.fill, t, int(self.fill[k]),
                                 share(self.fill[k], t), rt, int(self.fill_real[k]), share(self.fill_real[k], rt),
                                 int(self.odd[k, 0]), int(self.odd[k, 1]), c.row)
                for k, c in enumerate(self.side)]


def _real_positions(seq_lens, cu_padded) -> np.ndarray:
    """A mask over the group's token positions, True on real tokens (not pads), from each
    segment's start in cu_seqlens_padded and its length in seq_lens."""
    lv, lo = seq_lens
    cv, co = cu_padded
    lens = lv[int(lo[0]):int(lo[-1])].astype(np.int64)
    cu_v, cu_o = cv[int(co[0]):int(co[-1])].astype(np.int64), (co - co[0]).astype(np.int64)
    T = cu_v[cu_o[1:] - 1]
    base = np.concatenate(([0], np.cumsum(T)))[:-1]
    first = np.ones(cu_v.size, bool)
    first[cu_o[1:] - 1] = False  # every entry but each row's last starts a segment
    starts = np.repeat(base, np.diff(lo)) + cu_v[first]
    return span_mask(int(T.sum()), starts, lens)


def side_rows(r) -> list[list[str]]:
    """The text and HTML table of a report's side columns: one row per column."""
    from packtool.inspection.figures import fmt_pct
    return [[c.name, c.dtype, f"{c.width} (row)" if c.row and c.width == 1 else str(c.width), c.kind, str(c.fill), fmt_pct(c.fill_share),
             fmt_pct(c.fill_on_real_share), "-" if c.dtype.startswith("int") else f"{c.nan:,} / {c.inf:,}"]
            for c in r.side_columns]


# the counts behind the shares are in --json (inspection/side.SideColumnReport)
SIDE_HEAD = ["side column", "dtype", "K", "kind", "fill", "fill share", "on real tokens", "NaN / inf"]
