"""THD micro-batches from in-memory rollouts: token tensors (GPU or CPU) -> `ThdBatch`.

The batch is the one `packtool.megatron.PackedSlabDataset` yields for a slab holding the
same sequences, built without Parquet: the segment layout is `layout.compute_layout` under
the run's `Alignment` (fixed length included); tokens, targets, positions, side columns and
the CP zigzag slice come from `online.packed.pack_tensors` (megatron-free, through
`packtool.layout`; host arrays the size of the segments or of the local slab), and
`build_thd_params` makes the PackedSeqParams. Tokens stay on their device: they are
concatenated once and scattered into the padded slab there.
Needs torch and megatron-core (imported when this module is).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from packtool.align import Alignment
from packtool.megatron.thd import ThdBatch, build_thd_params
from packtool.online.packed import pack_tensors
from packtool.online.step import OnlinePackError, as_lengths
from packtool.params import group_coords


def thd_batch(input_ids: Sequence[torch.Tensor] | torch.Tensor, alignment: Alignment,
              loss_mask: Sequence[torch.Tensor] | torch.Tensor | None = None, *,
              side: dict | None = None, side_fill: dict | None = None,
              lengths=None, cp_rank: int = 0, cp_size: int | None = None, pad_id: int = 0,
              device: Any = None, cp_group: Any = None) -> ThdBatch:
    """One THD micro-batch of the given sequences, in the given order, for CP rank cp_rank.

    input_ids: one 1-D token tensor per sequence, or one flat tensor with `lengths`.
    loss_mask: the same shape; 1 where the token is a training target (e.g. the
      response), 0 elsewhere (any other value is refused). None: every token but each
      sequence's first (which nothing predicts).
    side: per-token side columns, name -> one tensor per sequence ([L] for a scalar per
      token, [L, K] for a K-wide row) or one flat tensor with `lengths`; placed through the
      same layout and CP slice as the tokens, on the tokens' device, into `ThdBatch.side`
      (token-aligned) and `ThdBatch.side_targets` (shifted like labels). Pads hold
      side_fill[name] (a key of side; a value the column's dtype holds exactly), by
      default 0.0 for floats and -1 for ints (packtool.side); a bool or uint8 column needs
      its fill given, complex and wider unsigned columns are refused.
    alignment: the run's Alignment; the slab is laid out by `layout.compute_layout`, with
      a fill segment up to `fixed_length` when it is set.
    cp_size: CP degree of the slice (default: cp_group's size, else alignment.cp); cp_rank: default
      cp_group's rank of this process; device: default, the tokens'."""
    cp_rank, cp_size = group_coords("cp_rank", cp_rank, "cp_size", cp_size, cp_group, "cp_group", "thd_batch: ")
    p = pack_tensors(input_ids, alignment, loss_mask, side=side, side_fill=side_fill, lengths=lengths,
                     cp_rank=cp_rank, cp_size=cp_size, pad_id=pad_id, device=device)
    cp = alignment.cp if cp_size is None else int(cp_size)
    params = build_thd_params(p.seg_len, p.seg_padded, cp, cp_rank, p.input_ids.device, cp_group)
    return ThdBatch(input_ids=p.input_ids[None], position_ids=p.position_ids[None],
                    labels=p.labels[None], loss_weight=p.loss_weight[None], params=params,
                    num_tokens=p.num_tokens, num_loss_tokens=p.num_loss_tokens, seg_real=p.seg_len,
                    side={k: v[None] for k, v in p.side.items()},
                    side_targets={k: v[None] for k, v in p.side_targets.items()},
                    segment=p.segment[None], seg_loss_tokens=p.seg_loss_tokens, side_nonfinite=p.side_nonfinite)


def thd_batches(input_ids: Sequence[torch.Tensor], alignment: Alignment,
                micro_batches: Sequence[Sequence[int]],
                loss_mask: Sequence[torch.Tensor] | None = None,
                side: dict | None = None, **kw) -> list[ThdBatch | None]:
    """`thd_batch` per micro-batch; micro_batches are lists of sequence indices (e.g.
    `StepBins.rank_bins(r)` or `MicroBatches.lists()` mapped to sequences; side columns
    as per-sequence lists); an empty one, or one of empty rollouts only, gives None (a
    zero-loss micro-batch, as PackedSlabDataset yields)."""
    n = len(input_ids)
    side = _per_sequence(side or {}, n)
    if loss_mask is not None and _count(loss_mask) != n:
        raise OnlinePackError(f"loss_mask of thd_batches has {_count(loss_mask)} entries for {n} sequences: "
                              f"give one mask per sequence of input_ids (a list, as input_ids)")
    out: list[ThdBatch | None] = []
    for m, mb in enumerate(_listed(micro_batches)):
        sel = _indices(mb, m, n)
        if not any(len(input_ids[i]) for i in sel):  # no sequence, or empty rollouts only (ffd places them)
            out.append(None)
            continue
        out.append(thd_batch([input_ids[i] for i in sel], alignment,
                             None if loss_mask is None else [loss_mask[i] for i in sel],
                             side={k: [v[i] for i in sel] for k, v in side.items()}, **kw))
    return out


def _listed(micro_batches):
    try:
        return list(micro_batches)
    except TypeError:
        raise OnlinePackError(f"micro_batches of thd_batches must be a list of micro-batches (each a list of "
                              f"sequence indices), got {type(micro_batches).__name__}") from None


def _indices(mb, m: int, n: int) -> list[int]:
    """Micro-batch m's sequence indices, each one of input_ids' n: Python's indexing would read
    -1 as the last sequence and int() 1.7 as 1 (a wrong sequence trained on without a word), and
    an index past the end is a raw IndexError deep in a list comprehension."""
    name = f"micro_batches[{m}]"
    sel = as_lengths(mb, name, f"indices into input_ids' {n} sequences", maximum=max(n - 1, 0))
    if sel.size and not n:  # no range to say (0 to -1)
        raise OnlinePackError(f"{name} holds sequence indices, but input_ids holds no sequence")
    return sel.tolist()


def _count(v) -> int | None:
    try:
        return len(v)
    except TypeError:  # a 0-d tensor, an int
        return None


def _per_sequence(side, n: int) -> dict:
    """thd_batches picks each micro-batch's rows from per-sequence lists: a column that is a
    flat tensor or has another count would be cut at the wrong rows (or fail on an index)."""
    if not isinstance(side, Mapping):
        raise OnlinePackError(f"side must be a dict of column name -> tensors, got {type(side).__name__}")
    for name, v in side.items():
        try:  # a list/tuple of tensors, or a stacked [B, L] tensor whose rows are the sequences
            count = len(v) if hasattr(v, "__getitem__") and not isinstance(v, (str, bytes)) else None
        except TypeError:  # a 0-d tensor
            count = None
        if count != n:
            got = f"{count} entries" if count is not None else f"one {type(v).__name__}"
            raise OnlinePackError(f"side column {name!r} of thd_batches is {got} for {n} sequences: give one "
                                  f"tensor per sequence of input_ids (a list, as input_ids)")
    return side
