"""`inspect` on side columns (FORMAT.md "Side columns"): which columns a packed output carries
and how much of each holds the fill, on all positions and on real tokens (tokens that had no
value in the input: prompt tokens of a support column, say), and how many NaN / +-inf values
a float column holds (kept by pack as read; they make a PPO loss NaN). Reads a shard's side columns
and two small layout columns one row group at a time; numpy over the flattened lists."""
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


def side_reports(side, paths: list[str]) -> list[SideColumnReport]:
    """One report per side column over the shards at `paths` (none when there are no columns)."""
    if not side:
        return []
    import pyarrow.parquet as pq

    from packtool.storage import arrow_file
    fill = np.zeros(len(side), np.int64)
    fill_real = np.zeros(len(side), np.int64)
    odd = np.zeros((len(side), 2), np.int64)  # NaN, +-inf
    total = real_total = 0
    cols = ["seq_lens", "cu_seqlens_padded"] + [c.name for c in side]
    for path in paths:
        pf = pq.ParquetFile(arrow_file(path))
        for g in range(pf.num_row_groups):
            t = pf.read_row_group(g, columns=cols)
            sl, cu = t.column("seq_lens").combine_chunks(), t.column("cu_seqlens_padded").combine_chunks()
            lens = sl.values.to_numpy().astype(np.int64)
            cu_v, cu_o = cu.values.to_numpy().astype(np.int64), cu.offsets.to_numpy().astype(np.int64)
            T = cu_v[cu_o[1:] - 1]
            base = np.concatenate(([0], np.cumsum(T)))[:-1]
            nseg = np.diff(sl.offsets.to_numpy())
            first = np.ones(cu_v.size, bool)
            first[cu_o[1:] - 1] = False  # every entry but each row's last starts a segment
            starts = np.repeat(base, nseg) + cu_v[first]
            real = span_mask(int(T.sum()), starts, lens)
            total += int(T.sum())
            real_total += int(real.sum())
            for k, c in enumerate(side):
                col = t.column(c.name).combine_chunks()
                o = col.offsets.to_numpy()
                v = col.values.slice(int(o[0]), int(o[-1] - o[0]))
                if c.width > 1:
                    v = v.values.slice(v.offset * c.width, len(v) * c.width)
                vals = v.to_numpy(zero_copy_only=False)
                odd[k] += nonfinite(vals)
                is_fill = (vals.reshape(-1, c.width) == c.fill).all(axis=1)
                fill[k] += int(is_fill.sum())
                fill_real[k] += int((is_fill & real).sum())
    share = lambda a, b: float(a) / b if b else 0.0  # noqa: E731
    return [SideColumnReport(c.name, c.dtype, c.width, c.kind, c.fill, total, int(fill[k]), share(fill[k], total),
                             real_total, int(fill_real[k]), share(fill_real[k], real_total), int(odd[k, 0]),
                             int(odd[k, 1]))
            for k, c in enumerate(side)]


def side_rows(r) -> list[list[str]]:
    """The text and HTML table of a report's side columns: one row per column."""
    from packtool.inspection.figures import fmt_pct
    return [[c.name, c.dtype, str(c.width), c.kind, str(c.fill), fmt_pct(c.fill_share),
             fmt_pct(c.fill_on_real_share), "-" if c.dtype.startswith("int") else f"{c.nan:,} / {c.inf:,}"]
            for c in r.side_columns]


# the counts behind the shares are in --json (inspection/side.SideColumnReport)
SIDE_HEAD = ["side column", "dtype", "K", "kind", "fill", "fill share", "on real tokens", "NaN / inf"]
