"""`verify`, one record batch's slabs: each slab's layout recomputed with
`layout.compute_layout` from its own `seq_lens` and compared figure by figure (pads, T,
num_tokens, segment lengths), the divisibility, capacity, singleton and fixed-length rules of
the manifest's alignment, and the CP zigzag cut the loader makes.
"""
from __future__ import annotations

import numpy as np

from packtool.layout import compute_layout, cp_merge, cp_rank_index
from packtool.verification.problems import first_of


def check_layout(S, nulls, T, nseg, seq_lens, padded, fill, seg_row, seg_in_row, ok_rows, row0, job, log):
    """Recompute each slab's layout from its real seq_lens with compute_layout and compare. A
    rule that reads a scalar (`S`) skips the slabs where that scalar is null (`nulls`)."""
    a, where = job.alignment, dict(shard=job.name)
    real = ~fill
    rows = np.flatnonzero(ok_rows)
    if rows.size == 0:
        return
    sel = ok_rows[seg_row] & real
    counts = np.bincount(seg_row[sel], minlength=T.size)[rows]
    lay = compute_layout(seq_lens[sel], np.concatenate(([0], np.cumsum(counts))), a)
    fill_pad, tail_pad, layout_pad = (S[c].astype(np.int64)[rows] for c in ("fill_pad", "tail_pad", "layout_pad"))
    singleton = S["singleton"].astype(bool)[rows]
    known = {c: ~nulls[c][rows] for c in ("fill_pad", "tail_pad", "layout_pad", "singleton", "num_tokens")}
    Tr = T[rows]
    foot = Tr - fill_pad  # known where fill_pad is
    # divisibility and capacity, phrased by the rule that the manifest's config imposes
    seg_bad = np.flatnonzero(ok_rows[seg_row] & (padded % a.s != 0))
    for i in seg_bad[first_of(seg_row[seg_bad])]:
        log.add("segment_alignment", f"segment {int(seg_in_row[i])} has padded length {int(padded[i])}, "
                f"not a multiple of the per-sequence multiple s={a.s} ({a.describe()})",
                row=row0 + int(seg_row[i]), segment=int(seg_in_row[i]), expected=a.s, found=int(padded[i]), **where)
    for j in np.flatnonzero((foot % a.t != 0) & known["fill_pad"]):
        log.add("slab_alignment", f"slab footprint T-fill_pad = {int(foot[j])} is not a multiple of the "
                f"per-slab multiple t={a.t} required by {a.describe()}", row=row0 + int(rows[j]),
                expected=int(-(-foot[j] // a.t) * a.t), found=int(foot[j]), **where)
    over = (foot > a.usable) & ~singleton & known["fill_pad"] & known["singleton"]
    for j in np.flatnonzero(over):
        log.add("capacity", f"slab footprint {int(foot[j])} exceeds the usable capacity U={a.usable} "
                f"(capacity {a.capacity}) and the slab is not a declared singleton",
                row=row0 + int(rows[j]), expected=a.usable, found=int(foot[j]), **where)
    one_fit = (counts != 1) | (lay.footprint <= a.usable)
    for j in np.flatnonzero(singleton & (one_fit | (job.overflow_policy != "singleton"))):
        log.add("singleton", f"slab is marked singleton but holds {int(counts[j])} real segment(s) with "
                f"footprint {int(lay.footprint[j])} (U={a.usable}, overflow policy "
                f"{job.overflow_policy!r})", row=row0 + int(rows[j]), **where)
    if a.fixed_length is not None:
        for j in np.flatnonzero((Tr != a.fixed_length) & ~singleton & known["singleton"]):
            log.add("fixed_length", f"slab has T={int(Tr[j])} tokens, the fixed length is {a.fixed_length}",
                    row=row0 + int(rows[j]), expected=a.fixed_length, found=int(Tr[j]), **where)
    # the layout itself: the same compute_layout the packer ran, compared figure by figure
    for col, want, got in (("T", lay.slab_len, Tr), ("layout_pad", lay.layout_pad, layout_pad),
                           ("tail_pad", lay.tail_pad, tail_pad), ("fill_pad", lay.fill, fill_pad),
                           ("num_tokens", np.add.reduceat(lay.seg_len, lay.seg_offsets[:-1]),
                            S["num_tokens"].astype(np.int64)[rows])):
        for j in np.flatnonzero((want != got) & known.get(col, True)):
            log.add("layout", f"{col} is {int(got[j])}, the layout of its seq_lens under {a.describe()} "
                    f"C={a.capacity} gives {int(want[j])}", row=row0 + int(rows[j]),
                    expected=int(want[j]), found=int(got[j]), **where)
    same_n = np.diff(lay.seg_offsets) == nseg[rows]
    seg_sel = np.isin(seg_row, rows[same_n])
    exp_sel = np.repeat(same_n, np.diff(lay.seg_offsets))
    diff = np.flatnonzero((lay.seg_padded[exp_sel] != padded[seg_sel]) | (lay.is_fill[exp_sel] != fill[seg_sel]))
    sr, si, ep, fp_ = seg_row[seg_sel], seg_in_row[seg_sel], lay.seg_padded[exp_sel], padded[seg_sel]
    for i in diff[first_of(sr[diff])]:
        log.add("layout", f"segment {int(si[i])} occupies {int(fp_[i])} physical tokens; the layout "
                f"of this slab's seq_lens gives {int(ep[i])}", row=row0 + int(sr[i]), segment=int(si[i]),
                expected=int(ep[i]), found=int(fp_[i]), **where)
    for j in np.flatnonzero(~same_n):
        log.add("layout", f"slab has {int(nseg[rows[j]])} segments; its seq_lens lay out as "
                f"{int(np.diff(lay.seg_offsets)[j])} (a fixed-length fill segment is missing or extra)",
                row=row0 + int(rows[j]), **where)


def check_cp(ids, ids_off, seg_start, padded, seg_off, ok_rows, cp, row0, where, log):
    """CP zigzag (rank r holds chunks r and 2cp-1-r of every segment). For every segment: its
    padded length splits into 2*cp equal chunks (cp_chunk_ranges, the loader's own cut). For
    the first sane slab of the batch, token by token: cut it into the ranks' local slabs with
    cp_rank_index, check each holds T/cp tokens, and merge them back with cp_merge. (Once every
    segment divides, the round trip is exact for any tokens, so one slab per batch exercises
    the loader's path without paying cp extra passes over every token.)"""
    seg_sel = np.repeat(ok_rows, np.diff(seg_off))
    bad = np.flatnonzero(seg_sel & (padded % (2 * cp) != 0))
    for i in bad[:1]:
        r = int(np.searchsorted(seg_off, i, side="right") - 1)
        log.add("cp_chunks", f"segment {int(i - seg_off[r])} has padded length {int(padded[i])}, which "
                f"cannot be cut into 2*cp={2 * cp} equal zigzag chunks", row=row0 + r,
                segment=int(i - seg_off[r]), expected=2 * cp, found=int(padded[i]), **where)
    rows = np.flatnonzero(ok_rows)
    if not rows.size or bad.size:
        return
    r = int(rows[0])
    lo, hi = int(seg_off[r]), int(seg_off[r + 1])
    slab = ids[ids_off[r]:ids_off[r + 1]]
    starts, pads = seg_start[lo:hi], padded[lo:hi]
    locals_ = [slab[cp_rank_index(starts, pads, cp, k)] for k in range(cp)]
    sizes = [loc.size for loc in locals_]
    if any(n * cp != slab.size for n in sizes):
        log.add("cp_chunks", f"CP ranks would hold {sizes} tokens of a {slab.size}-token slab; each needs "
                f"T/cp = {slab.size // cp}", row=row0 + r, **where)
        return
    if not np.array_equal(cp_merge(locals_, starts, pads, cp), slab):
        log.add("cp_chunks", "merging the CP ranks' zigzag chunks does not give back the slab",
                row=row0 + r, **where)
