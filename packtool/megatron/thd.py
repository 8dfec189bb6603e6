"""One THD micro-batch for one CP rank: local tokens, labels, loss weights, PackedSeqParams.

Everything positional comes from `packtool.layout` (cp_chunk_ranges, cp_rank_index,
cp_local_cu_seqlens_padded): this module applies the zigzag, it does not re-derive it.

Conventions (the same as TransformerEngine and megatron-core's THD RoPE):
  cu_seqlens_q/kv          prefix sums of real segment lengths (int32)
  cu_seqlens_q/kv_padded   physical offsets of the FULL slab, before the CP split (int32);
                           megatron's THD RoPE divides them by cp itself
  max_seqlen_q/kv          longest padded segment of the full slab (sizes the RoPE table)
packtool's extra fields drive `attention.PackedCoreAttention`: per-chunk query/key cu
arrays and, with cp > 1, the index that picks each chunk's keys out of the gathered K/V.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import torch
from megatron.core.packed_seq_params import PackedSeqParams

from packtool.errors import PacktoolInputError
from packtool.layout import (
    cp_chunk_ranges,
    cp_local_cu_seqlens_padded,
    cp_rank_index,
    positions_in_segment,
    segment_of_position,
    shift_like_labels,
)
from packtool.params import group_coords, torch_device

__all__ = ["SlabSeqParams", "ThdBatch", "shifted_targets", "positions_in_segment", "build_thd_params",
           "make_thd_batch", "side_tensors"]


@dataclass
class SlabSeqParams(PackedSeqParams):
    """PackedSeqParams plus what packtool's core attention needs (host copies avoid a
    device sync per layer)."""

    cp_size: int = 1
    cp_rank: int = 0
    attn_cu_q: Optional[torch.Tensor] = None  # int32: query "sequences" (CP chunks)
    attn_cu_k: Optional[torch.Tensor] = None  # int32: their key ranges
    attn_max_q: int = 0
    attn_max_k: int = 0
    attn_cu_q_host: list = field(default_factory=list)
    attn_cu_k_host: list = field(default_factory=list)
    kv_index: Optional[torch.Tensor] = None  # int64 into the gathered [cp * t_local] K/V
    # packtool's RoPE per model that ran on this micro-batch (model.py's pre-hook): the model's
    # key -> (cos, sin [t_local, 1, head_dim], the position_ids they came from). One batch goes
    # through a policy and a reference or critic model of another base, head dim or dtype: each
    # attention applies its own model's rotation, never the one another model left here
    rope: dict = field(default_factory=dict)


@dataclass
class ThdBatch:
    """One micro-batch on one CP rank. Tensors are [1, t_local] (megatron's THD batch dim)."""

    input_ids: torch.Tensor  # int64
    position_ids: torch.Tensor  # int64, position inside the segment (packtool's RoPE; megatron's uses cu_seqlens)
    labels: torch.Tensor  # int64; 0 where weight is 0
    loss_weight: torch.Tensor  # float32: 1 where the position predicts a target
    params: SlabSeqParams
    num_tokens: int  # real tokens of the full micro-batch (all CP ranks)
    num_loss_tokens: int  # loss tokens of the full micro-batch (all CP ranks)
    seg_real: np.ndarray  # int64: real length of every segment (FLOP accounting)
    # per-token side columns (FORMAT.md "Side columns"), [1, t_local] or [1, t_local, K]:
    # `side` as stored (token-aligned: position p holds token p's value), `side_targets`
    # shifted like `labels` (target-aligned: position p holds token p+1's, fill at every
    # segment's last position), which is what pairs with the logits at p
    side: dict = field(default_factory=dict)
    side_targets: dict = field(default_factory=dict)
    # int64 [1, t_local]: the segment of every local position (pads: the one they follow),
    # and float32 [n_seg]: loss tokens of every segment of the full micro-batch (all CP
    # ranks), for per-sequence reductions such as GRPO's sequence mean (docs/RL.md)
    segment: Optional[torch.Tensor] = None
    seg_loss_tokens: Optional[torch.Tensor] = None
    # float side columns holding NaN / +-inf, with counts and the first (online.packed.PackedTensors')
    side_nonfinite: dict = field(default_factory=dict)


def shifted_targets(input_ids: np.ndarray, loss_mask: np.ndarray,
                    cu_padded: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """labels[i] = ids[i+1] and weight[i] = loss_mask[i+1] when i+1 is in the same
    physical segment, else label 0 / weight 0 (`layout.shift_like_labels`). loss_mask is
    already 0 on every segment's first token and on pads (FORMAT.md), the segment-end zero
    makes it explicit."""
    labels = shift_like_labels(np.asarray(input_ids, np.int64), cu_padded, 0)
    weight = shift_like_labels(np.asarray(loss_mask, np.float32), cu_padded, 0.0)
    labels[weight == 0] = 0
    return labels, weight


def build_thd_params(seg_len: np.ndarray, seg_padded: np.ndarray, cp: int, cp_rank: int,
                     device: torch.device | str = "cpu", cp_group: Any = None) -> SlabSeqParams:
    """PackedSeqParams(qkv_format='thd') for CP rank `cp_rank` of a slab whose segments
    have real lengths `seg_len` and physical lengths `seg_padded`; cp_group, when given, supplies
    the rank and size (params.group_coords), a contrary one is refused."""
    device = torch_device("device", device)
    cp_rank, cp = group_coords("cp_rank", cp_rank, "cp", cp, cp_group, "cp_group", "build_thd_params: ")
    cp = 1 if cp is None else cp
    seg_len = np.asarray(seg_len, np.int64)
    seg_padded = np.asarray(seg_padded, np.int64)
    cu = np.concatenate(([0], np.cumsum(seg_len))).astype(np.int32)
    cu_pad = np.concatenate(([0], np.cumsum(seg_padded))).astype(np.int32)
    seg_start = cu_pad[:-1].astype(np.int64)
    max_pad = int(seg_padded.max()) if seg_padded.size else 0
    kv_index = None
    if cp == 1:
        q_cu = k_cu = cu_pad.astype(np.int64)
        max_q = max_k = max_pad
    else:
        rng = cp_chunk_ranges(seg_start, seg_padded, cp)[:, cp_rank]  # [n, 2, 2]
        q_len = (rng[:, :, 1] - rng[:, :, 0]).reshape(-1)  # chunk lengths, local order
        # a chunk attends every key of its segment up to its own end (bottom-right causal)
        k_start = np.repeat(seg_start, 2)
        k_end = rng[:, :, 1].reshape(-1)
        k_len = k_end - k_start
        q_cu = np.concatenate(([0], np.cumsum(q_len)))
        k_cu = np.concatenate(([0], np.cumsum(k_len)))
        max_q, max_k = int(q_len.max()), int(k_len.max())
        # gathered K/V = rank 0's local slab, rank 1's, ...: where is each global position?
        t_local = int(cp_local_cu_seqlens_padded(cu_pad, cp)[-1])
        where = np.empty(int(cu_pad[-1]), np.int64)
        for g in range(cp):
            where[cp_rank_index(seg_start, seg_padded, cp, g)] = g * t_local + np.arange(t_local)
        glob = np.repeat(k_start - np.concatenate(([0], np.cumsum(k_len)[:-1])), k_len)
        glob += np.arange(int(k_len.sum()))
        kv_index = torch.as_tensor(where[glob], device=device)
    i32 = dict(dtype=torch.int32, device=device)
    return SlabSeqParams(
        qkv_format="thd",
        cu_seqlens_q=torch.as_tensor(cu, **i32), cu_seqlens_kv=torch.as_tensor(cu, **i32),
        cu_seqlens_q_padded=torch.as_tensor(cu_pad, **i32),
        cu_seqlens_kv_padded=torch.as_tensor(cu_pad, **i32),
        max_seqlen_q=max_pad, max_seqlen_kv=max_pad, cp_group=cp_group,
        cp_size=cp, cp_rank=cp_rank,
        attn_cu_q=torch.as_tensor(q_cu.astype(np.int32), **i32),
        attn_cu_k=torch.as_tensor(k_cu.astype(np.int32), **i32),
        attn_max_q=max_q, attn_max_k=max_k,
        attn_cu_q_host=q_cu.tolist(), attn_cu_k_host=k_cu.tolist(), kv_index=kv_index)


def side_tensors(side: dict, cu_padded: np.ndarray, idx, fills: dict, device) -> tuple[dict, dict]:
    """(token-aligned, target-aligned) side columns of one CP rank: full-slab values are
    shifted over the full slab's segments first, then both are cut to the rank's positions
    `idx` (None: all). numpy or torch in; torch [1, t_local(, K)] out on `device`."""
    stored, shifted = {}, {}
    for name, v in side.items():
        if isinstance(v, np.ndarray) and not v.flags.writeable:
            v = v.copy()  # a view of a cached Arrow buffer: torch wants memory it may own
        v = torch.as_tensor(v, device=device)
        tgt = shift_like_labels(v, cu_padded, fills[name])
        if idx is not None:
            v, tgt = v[idx], tgt[idx]
        stored[name], shifted[name] = v[None], tgt[None]
    return stored, shifted


def _checked_mask(loss_mask) -> np.ndarray:
    """The micro-batch's loss_mask, every value 0 or 1. The weights are the mask itself
    (float32), so a 2 or a 255 would count that target twice or 255 times in the loss and in
    num_loss_tokens, and a -1/-100 "ignore" or a NaN would train on it. The dataset's reader
    refuses such a slab as it decodes its row group, naming shard and row (slabs.check); this
    holds a caller's own arrays (make_thd_batch is public) to the same rule."""
    mask = np.asarray(loss_mask)
    if mask.dtype == np.bool_:
        return mask
    if mask.dtype.kind not in "iuf":
        raise PacktoolInputError(f"loss_mask holds {mask.dtype} values: pass 0/1 per token (bool, integer or float)")
    bad = (mask != 0) & (mask != 1)
    if bad.any():
        p = int(np.flatnonzero(bad)[0])
        raise PacktoolInputError(f"loss_mask holds {mask.flat[p].item()} at micro-batch position {p}: loss_mask is 0 "
                                 f"(not a target) or 1 (a target) per token (FORMAT.md); pass (mask > 0) for a "
                                 f"mask that marks ignored tokens otherwise, and carry real-valued loss weights "
                                 f"as a side column (side=)")
    return mask


def make_thd_batch(input_ids: np.ndarray, loss_mask: np.ndarray, seg_len: np.ndarray,
                   seg_padded: np.ndarray, cp: int | None = None, cp_rank: int = 0,
                   device: torch.device | str = "cpu", cp_group: Any = None,
                   side: dict | None = None, side_fill: dict | None = None) -> ThdBatch:
    """Slice a full (all-CP-ranks) THD micro-batch for one CP rank and build its params.
    side: per-token columns of the full micro-batch (name -> [T] or [T, K]), their pads
    holding `side_fill[name]`. cp and cp_rank default to cp_group's size and this process's rank
    in it (params.group_coords), else 1 and 0: a group given alone left every CP rank slicing rank
    0's chunks, a batch the model's CP check passed (RB-1)."""
    device = torch_device("device", device)
    cp_rank, cp = group_coords("cp_rank", cp_rank, "cp", cp, cp_group, "cp_group", "make_thd_batch: ")
    cp = 1 if cp is None else cp
    seg_len = np.asarray(seg_len, np.int64)
    seg_padded = np.asarray(seg_padded, np.int64)
    cu_pad = np.concatenate(([0], np.cumsum(seg_padded)))
    if int(cu_pad[-1]) != len(input_ids):
        raise PacktoolInputError(f"input_ids: the micro-batch has {len(input_ids)} tokens but seg_padded sums "
                                 f"to {int(cu_pad[-1])}: pass one padded length per segment of this micro-batch")
    labels, weight = shifted_targets(np.asarray(input_ids), _checked_mask(loss_mask), cu_pad)
    n_loss = int(weight.sum())
    seg = segment_of_position(seg_padded)
    seg_loss = np.bincount(seg, weights=weight, minlength=seg_padded.size).astype(np.float32)
    pos = positions_in_segment(seg_padded)
    ids = np.asarray(input_ids, np.int64)
    idx = None
    if cp > 1:
        idx = cp_rank_index(cu_pad[:-1], seg_padded, cp, cp_rank)
        ids, labels, weight, pos, seg = ids[idx], labels[idx], weight[idx], pos[idx], seg[idx]
    params = build_thd_params(seg_len, seg_padded, cp, cp_rank, device, cp_group)
    stored, shifted = side_tensors(side or {}, cu_pad, None if idx is None else torch.as_tensor(idx),
                                   side_fill or {}, device)

    def t(a, dt):
        return torch.as_tensor(a, dtype=dt, device=device)[None]

    return ThdBatch(input_ids=t(ids, torch.int64), position_ids=t(pos, torch.int64),
                    labels=t(labels, torch.int64), loss_weight=t(weight, torch.float32),
                    params=params, num_tokens=int(seg_len.sum()),
                    num_loss_tokens=n_loss,
                    seg_real=seg_len, side=stored, side_targets=shifted,
                    segment=t(seg, torch.int64),
                    seg_loss_tokens=torch.as_tensor(seg_loss, device=device))
