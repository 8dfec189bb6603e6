"""THD micro-batches from in-memory rollouts: token tensors (GPU or CPU) -> `ThdBatch`.

The batch is the one `packtool.megatron.PackedSlabDataset` yields for a slab holding the
same sequences, built without Parquet: the segment layout is `layout.compute_layout` under
the run's `Alignment` (fixed length included), targets, positions and the CP zigzag slice
come from `packtool.megatron.thd` and `packtool.layout` (host arrays the size of the
segments or of the local slab), and `build_thd_params` makes the PackedSeqParams. Tokens
stay on their device: they are concatenated once and scattered into the padded slab there.
Needs torch and megatron-core (imported when this module is).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from packtool.align import Alignment
from packtool.layout import compute_layout, cp_rank_index
from packtool.megatron.thd import ThdBatch, build_thd_params, positions_in_segment
from packtool.online.step import OnlinePackError, as_lengths


def _flat(x, lengths, what: str):
    """(flat 1-D tensor, int64 lengths) from a list of per-sequence tensors or a flat one."""
    if isinstance(x, torch.Tensor):
        if lengths is None:
            raise OnlinePackError(f"{what} is one flat tensor: pass lengths= (one per sequence)")
        lens = np.asarray(lengths, np.int64).reshape(-1)
        if int(lens.sum()) != x.numel():
            raise OnlinePackError(f"{what} has {x.numel()} tokens but lengths sum to "
                                  f"{int(lens.sum())}: pass one length per sequence")
        return x.reshape(-1), lens
    seqs = [torch.as_tensor(t).reshape(-1) for t in x]
    if not seqs:
        raise OnlinePackError(f"{what}: no sequences (a micro-batch needs at least one)")
    lens = np.fromiter((t.numel() for t in seqs), np.int64, len(seqs))
    return torch.cat(seqs), lens


def _integer_ids(input_ids, lengths) -> None:
    """Token ids and lengths are integers: the int64 cast would truncate a float (1.7 -> 1)."""
    if lengths is not None:
        as_lengths(lengths)  # refuses a float length, names it
    seqs = [input_ids] if isinstance(input_ids, torch.Tensor) else input_ids
    for i, t in enumerate(seqs):
        dt = t.dtype if isinstance(t, torch.Tensor) else torch.as_tensor(t).dtype
        if dt.is_floating_point or dt.is_complex or dt == torch.bool:
            where = "input_ids" if isinstance(input_ids, torch.Tensor) else f"input_ids[{i}]"
            raise OnlinePackError(f"{where} is a {dt} tensor: token ids must be integers (the cast "
                                  f"to int64 would truncate 1.7 to 1); pass integer ids (torch.long)")


def thd_batch(input_ids: Sequence[torch.Tensor] | torch.Tensor, alignment: Alignment,
              loss_mask: Sequence[torch.Tensor] | torch.Tensor | None = None, *,
              lengths=None, cp_rank: int = 0, cp_size: int | None = None, pad_id: int = 0,
              device: Any = None, cp_group: Any = None) -> ThdBatch:
    """One THD micro-batch of the given sequences, in the given order, for CP rank cp_rank.

    input_ids: one 1-D token tensor per sequence, or one flat tensor with `lengths`.
    loss_mask: the same shape; nonzero where the token is a training target (e.g. the
      response). None: every token but each sequence's first (which nothing predicts).
    alignment: the run's Alignment; the slab is laid out by `layout.compute_layout`, with
      a fill segment up to `fixed_length` when it is set.
    cp_size: CP degree of the slice (default alignment.cp); device: default, the tokens'."""
    _integer_ids(input_ids, lengths)
    ids, lens = _flat(input_ids, lengths, "input_ids")
    device = ids.device if device is None else torch.device(device)
    if loss_mask is None:
        mask = torch.ones(ids.numel(), dtype=torch.float32, device=device)
    else:
        mask, mlens = _flat(loss_mask, lengths, "loss_mask")
        if not np.array_equal(mlens, lens):
            raise OnlinePackError("loss_mask must have one entry per token of input_ids "
                                  "(same lengths per sequence)")
        mask = mask.to(device=device, dtype=torch.float32)
    if lens.size and int(lens.min()) < 1:
        raise OnlinePackError(f"sequence {int(np.argmin(lens))} is empty: drop empty "
                              f"rollouts before batching")
    cp = alignment.cp if cp_size is None else int(cp_size)
    lay = compute_layout(lens, np.array([0, lens.size]), alignment)
    T = int(lay.slab_len[0])
    real = ~lay.is_fill
    start = lay.seg_start[real]
    n = int(lens.sum())
    # token j of sequence k lands at start[k] + j: one scatter on the tokens' device
    shift = torch.as_tensor(start - (np.cumsum(lens) - lens), device=device)
    dst = torch.repeat_interleave(shift, torch.as_tensor(lens, device=device), output_size=n)
    dst += torch.arange(n, device=device)
    full_ids = torch.full((T,), int(pad_id), dtype=torch.int64, device=device)
    full_ids[dst] = ids.to(device=device, dtype=torch.int64)
    weight_in = torch.zeros(T, dtype=torch.float32, device=device)
    weight_in[dst] = (mask != 0).to(torch.float32)
    weight_in[torch.as_tensor(start, device=device)] = 0.0  # FORMAT.md: first token: no target
    cu_pad = np.concatenate(([0], np.cumsum(lay.seg_padded)))
    # labels[i] = ids[i+1], weight[i] = mask[i+1] inside a segment (megatron.thd.shifted_targets)
    labels = torch.zeros(T, dtype=torch.int64, device=device)
    weight = torch.zeros(T, dtype=torch.float32, device=device)
    labels[:-1] = full_ids[1:]
    weight[:-1] = weight_in[1:]
    ends = cu_pad[1:] - 1
    ends = torch.as_tensor(ends[(ends >= 0) & (ends < T)], device=device)
    labels[ends] = 0
    weight[ends] = 0.0
    labels = labels * (weight != 0)
    n_loss = int(weight.sum().item())  # the full micro-batch's (all CP ranks); one sync
    pos = torch.as_tensor(positions_in_segment(lay.seg_padded), device=device)
    if cp > 1:
        idx = torch.as_tensor(cp_rank_index(cu_pad[:-1], lay.seg_padded, cp, cp_rank),
                              device=device)
        full_ids, labels, weight, pos = full_ids[idx], labels[idx], weight[idx], pos[idx]
    params = build_thd_params(lay.seg_len, lay.seg_padded, cp, cp_rank, device, cp_group)
    return ThdBatch(input_ids=full_ids[None], position_ids=pos[None], labels=labels[None],
                    loss_weight=weight[None], params=params, num_tokens=n,
                    num_loss_tokens=n_loss,
                    seg_real=lay.seg_len)


def thd_batches(input_ids: Sequence[torch.Tensor], alignment: Alignment,
                micro_batches: Sequence[Sequence[int]],
                loss_mask: Sequence[torch.Tensor] | None = None,
                **kw) -> list[ThdBatch | None]:
    """`thd_batch` per micro-batch; micro_batches are lists of sequence indices (e.g.
    `StepBins.rank_bins(r)` or `MicroBatches.lists()` mapped to sequences); an empty one
    gives None (a zero-loss micro-batch, as PackedSlabDataset yields)."""
    out: list[ThdBatch | None] = []
    for mb in micro_batches:
        sel = [int(i) for i in mb]
        if not sel:
            out.append(None)
            continue
        out.append(thd_batch([input_ids[i] for i in sel], alignment,
                             None if loss_mask is None else [loss_mask[i] for i in sel], **kw))
    return out
