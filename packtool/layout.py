"""Segment layout inside slabs: padded lengths, cu arrays, tail pad, fill, CP zigzag chunks.

All functions work on many bins at once. A set of bins is CSR: `seg_len[bin_offsets[b]:
bin_offsets[b+1]]` are the real lengths of bin b's segments in slab order. The rules
(s, t, fixed length) come from `align.Alignment`; this module only applies them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from packtool.align import Alignment
from packtool.errors import PacktoolConfigError, PacktoolInputError


@dataclass(frozen=True)
class Layout:
    """Physical layout of every slab. Segment arrays include one trailing fill segment per
    slab that has fixed-length fill (real length 0, `is_fill` True)."""

    seg_offsets: np.ndarray  # int64[n_bins+1]: slab b's segments, fill segment included
    seg_len: np.ndarray  # int64: real tokens of each segment (0 for a fill segment)
    seg_padded: np.ndarray  # int64: physical tokens (tail pad counted on the last real one)
    seg_start: np.ndarray  # int64: physical start of each segment inside its slab
    is_fill: np.ndarray  # bool
    footprint: np.ndarray  # int64[n_bins]: round_up(sum(round_up(len, s)), t)
    layout_pad: np.ndarray  # int64[n_bins]: sum(round_up(len, s) - len), the per-sequence gaps
    tail_pad: np.ndarray  # int64[n_bins]: footprint - sum(round_up(len, s)), paid once per slab
    fill: np.ndarray  # int64[n_bins]: fixed_length - footprint (0 without fixed length)
    slab_len: np.ndarray  # int64[n_bins]: footprint + fill, the row length on disk

    @property
    def n_bins(self) -> int:
        return self.seg_offsets.size - 1

    def bin_of_segment(self) -> np.ndarray:
        return np.repeat(np.arange(self.n_bins), np.diff(self.seg_offsets))

    def cu_seqlens(self, b: int) -> np.ndarray:
        """Prefix sums of real lengths of slab b (a fill segment repeats the last value)."""
        return flat_cu(self, b, b + 1)[0]

    def cu_seqlens_padded(self, b: int) -> np.ndarray:
        """Physical segment offsets of slab b; the last value equals the slab length."""
        return flat_cu(self, b, b + 1)[1]


def compute_layout(seg_len: np.ndarray, bin_offsets: np.ndarray, align: Alignment) -> Layout:
    seg_len = np.asarray(seg_len, dtype=np.int64)
    bin_offsets = np.asarray(bin_offsets, dtype=np.int64)
    n_bins = bin_offsets.size - 1
    counts = np.diff(bin_offsets)
    if n_bins and (counts < 1).any():
        raise ValueError(f"slab {int(np.argmin(counts))} has no segments")  # a planner bug: bins are never empty
    fp = align.seq_footprint(seg_len)
    fp_sum = np.add.reduceat(fp, bin_offsets[:-1]) if n_bins else np.zeros(0, np.int64)
    len_sum = np.add.reduceat(seg_len, bin_offsets[:-1]) if n_bins else np.zeros(0, np.int64)
    footprint = align.bin_footprint(fp_sum)
    tail = footprint - fp_sum
    padded = fp.copy()
    padded[bin_offsets[1:] - 1] += tail
    if align.fixed_length is not None:
        fill = np.maximum(align.fixed_length - footprint, 0)
    else:
        fill = np.zeros(n_bins, np.int64)
    has_fill = fill > 0
    # insert one fill segment after the last real segment of each filled bin
    new_counts = counts + has_fill
    seg_offsets = np.concatenate(([0], np.cumsum(new_counts)))
    n_out = int(seg_offsets[-1])
    real_pos = np.arange(seg_len.size) + np.repeat(seg_offsets[:-1] - bin_offsets[:-1], counts)
    out_len = np.zeros(n_out, np.int64)
    out_pad = np.zeros(n_out, np.int64)
    is_fill = np.ones(n_out, bool)
    out_len[real_pos] = seg_len
    out_pad[real_pos] = padded
    is_fill[real_pos] = False
    out_pad[seg_offsets[1:][has_fill] - 1] = fill[has_fill]
    seg_start = _segment_starts(out_pad, seg_offsets)
    return Layout(seg_offsets=seg_offsets, seg_len=out_len, seg_padded=out_pad,
                  seg_start=seg_start, is_fill=is_fill, footprint=footprint,
                  layout_pad=fp_sum - len_sum, tail_pad=tail, fill=fill,
                  slab_len=footprint + fill)


def _segment_starts(sizes: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Exclusive prefix sums of `sizes` restarting at every CSR boundary."""
    cs = np.concatenate(([0], np.cumsum(sizes)))
    counts = np.diff(offsets)
    return cs[:-1] - np.repeat(cs[offsets[:-1]], counts)


# --- context parallel zigzag ---------------------------------------------------------
# Rank r of cp holds chunks r and 2cp-1-r of every segment (TransformerEngine
# thd_get_partitioned_indices; megatron-core get_batch_on_this_cp_rank for THD).

def cp_chunk_ranges(seg_start: np.ndarray, seg_padded: np.ndarray, cp: int) -> np.ndarray:
    """int64[n_segments, cp, 2, 2]: for each segment and rank, the two [start, end) ranges
    (slab coordinates) that rank holds. Needs seg_padded % (2*cp) == 0."""
    seg_start = np.asarray(seg_start, np.int64)
    seg_padded = np.asarray(seg_padded, np.int64)
    if cp == 1:
        out = np.zeros((seg_start.size, 1, 2, 2), np.int64)
        out[:, 0, 0, 0] = seg_start
        out[:, 0, 0, 1] = seg_start + seg_padded
        out[:, 0, 1, :] = (seg_start + seg_padded)[:, None]  # empty second chunk
        return out
    if (seg_padded % (2 * cp)).any():
        bad = int(np.flatnonzero(seg_padded % (2 * cp))[0])
        raise PacktoolInputError(f"seg_padded: segment {bad} has padded length {int(seg_padded[bad])}, not a "
                                 f"multiple of 2*cp={2 * cp}: pack the segments for this cp (Alignment(cp={cp}))")
    chunk = seg_padded // (2 * cp)
    r = np.arange(cp)
    first = seg_start[:, None] + r[None, :] * chunk[:, None]
    second = seg_start[:, None] + (2 * cp - 1 - r)[None, :] * chunk[:, None]
    out = np.empty((seg_start.size, cp, 2, 2), np.int64)
    out[:, :, 0, 0] = first
    out[:, :, 0, 1] = first + chunk[:, None]
    out[:, :, 1, 0] = second
    out[:, :, 1, 1] = second + chunk[:, None]
    return out


def cp_rank_index(seg_start: np.ndarray, seg_padded: np.ndarray, cp: int, rank: int) -> np.ndarray:
    """Slab positions that make up rank `rank`'s local slab, in local order."""
    if not 0 <= rank < cp:
        raise PacktoolConfigError(f"cp_rank={rank} is out of range for cp={cp}: pass a rank in 0..{cp - 1}")
    rng = cp_chunk_ranges(seg_start, seg_padded, cp)[:, rank].reshape(-1, 2)
    lens = rng[:, 1] - rng[:, 0]
    if lens.sum() == 0:
        return np.zeros(0, np.int64)
    starts = np.repeat(rng[:, 0] - np.concatenate(([0], np.cumsum(lens)[:-1])), lens)
    return starts + np.arange(lens.sum())


def cp_local_cu_seqlens_padded(cu_seqlens_padded: np.ndarray, cp: int) -> np.ndarray:
    """Each rank holds padded/cp tokens of every segment, so local offsets are global / cp."""
    return np.asarray(cu_seqlens_padded) // cp


def cp_merge(local_slabs: list[np.ndarray], seg_start: np.ndarray, seg_padded: np.ndarray,
             cp: int) -> np.ndarray:
    """Inverse of slicing: rebuild the full slab from every rank's local slab."""
    total = int(np.sum(seg_padded))
    out = np.empty(total, dtype=np.asarray(local_slabs[0]).dtype)
    for r in range(cp):
        out[cp_rank_index(seg_start, seg_padded, cp, r)] = local_slabs[r]
    return out


def flat_cu(layout: Layout, b0: int, b1: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """cu_seqlens and cu_seqlens_padded of slabs [b0, b1) as one flat array each (n_seg+1
    entries per slab), plus their list offsets: the columnar form the writer stores."""
    lo, hi = int(layout.seg_offsets[b0]), int(layout.seg_offsets[b1])
    counts = np.diff(layout.seg_offsets[b0:b1 + 1])
    rel = layout.seg_offsets[b0:b1] - lo
    n = hi - lo
    # each slab's list is [0, cumsum...]: one leading zero then the segments' running ends
    ends_len = _segment_starts(layout.seg_len[lo:hi], np.concatenate((rel, [n]))) + layout.seg_len[lo:hi]
    ends_pad = layout.seg_start[lo:hi] + layout.seg_padded[lo:hi]
    list_off = np.concatenate(([0], np.cumsum(counts + 1)))
    cu = np.zeros(int(list_off[-1]), np.int64)
    cup = np.zeros_like(cu)
    pos = np.arange(n) + np.repeat(np.arange(b1 - b0), counts) + 1
    cu[pos] = ends_len
    cup[pos] = ends_pad
    return cu.astype(np.int32), cup.astype(np.int32), list_off.astype(np.int32)


# --- per-token values through the layout (tokens, masks, side columns) ---------------
# numpy or torch: a torch tensor stays a torch tensor on its own device; torch is only
# imported when one is passed, so the base layer keeps numpy as its one dependency.

def _is_torch(x) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def positions_in_segment(seg_padded: np.ndarray) -> np.ndarray:
    """Position of every physical token inside its segment (0 at each segment start)."""
    seg_padded = np.asarray(seg_padded, np.int64)
    starts = np.concatenate(([0], np.cumsum(seg_padded)[:-1]))
    return np.arange(int(seg_padded.sum())) - np.repeat(starts, seg_padded)


def segment_of_position(seg_padded: np.ndarray) -> np.ndarray:
    """Segment index of every physical token (pads belong to the segment they follow)."""
    seg_padded = np.asarray(seg_padded, np.int64)
    return np.repeat(np.arange(seg_padded.size), seg_padded)


def token_destinations(lens: np.ndarray, seg_start: np.ndarray, like=None):
    """Where token j of sequence k lands in the slab: seg_start[k] + j, for the sequences'
    tokens concatenated in order. `like` a torch tensor: the index is built on its device
    (host arrays stay the size of the segments, not of the tokens)."""
    lens = np.asarray(lens, np.int64)
    shift = np.asarray(seg_start, np.int64) - (np.cumsum(lens) - lens)
    n = int(lens.sum())
    if like is None or not _is_torch(like):
        return np.repeat(shift, lens) + np.arange(n)
    import torch
    dev = like.device
    dst = torch.repeat_interleave(torch.as_tensor(shift, device=dev), torch.as_tensor(lens, device=dev),
                                  output_size=n)
    return dst + torch.arange(n, device=dev)


def place_tokens(values, dst, total: int, fill):
    """A slab of `total` positions holding `values[j]` at `dst[j]` and `fill` elsewhere;
    values are per token along axis 0 with any trailing shape (a K-wide row per token)."""
    shape = (int(total), *tuple(values.shape[1:]))
    if _is_torch(values):
        import torch
        out = torch.full(shape, fill, dtype=values.dtype, device=values.device)
    else:
        out = np.full(shape, fill, dtype=np.asarray(values).dtype)
    out[dst] = values
    return out


def shift_like_labels(values, cu_seqlens_padded, fill):
    """Token-aligned -> target-aligned, the shift `labels` get (FORMAT.md, "Side columns").

    out[p] = values[p+1] inside a segment; every segment's last position
    (cu_seqlens_padded[i+1] - 1) holds `fill`: nothing after it belongs to the segment.
    The value of token i (its log-prob, its sampler support) is then at position i-1, where
    the logits that predict token i sit. `values` has the tokens on axis 0 and any trailing
    shape; numpy or torch (the result stays on the tensor's device)."""
    cu = np.asarray(cu_seqlens_padded.cpu() if _is_torch(cu_seqlens_padded) else cu_seqlens_padded,
                    np.int64).reshape(-1)
    n = int(values.shape[0])
    if cu.size < 1 or cu[0] != 0 or cu[-1] != n or (np.diff(cu) < 0).any():
        raise PacktoolInputError(f"cu_seqlens_padded must rise from 0 to the {n} positions of the values, "
                         f"got {cu[:3].tolist()}...{cu[-2:].tolist()}")
    ends = cu[1:][np.diff(cu) > 0] - 1
    if _is_torch(values):
        import torch
        out = torch.empty_like(values)
        ends = torch.as_tensor(ends, device=values.device)
    else:
        out = np.empty_like(values)
    out[:-1] = values[1:]
    out[ends] = fill
    return out
