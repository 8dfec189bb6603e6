"""Which slabs make each micro-batch of each optimizer step, and how merged ones are laid out.

Steps. With a DP plan in the manifest (`packtool pack --dp N`) a rank's step s is exactly
the slabs the packer gave it (`dp_rank`, `step`, ordered by `microbatch`); each epoch
permutes the order of the steps with the seed, the same on every rank. Without one, every
epoch permutes row groups, then rows within each row group (reads stay sequential), and
deals the stream round-robin to the DP ranks, `grad_accum` slabs per rank per step.

Token budget (`micro_batch_tokens`). Within a step, consecutive slabs merge greedily into
one THD micro-batch while the merged footprint fits: each slab's tail pad and fill are
stripped, the segments are concatenated and the per-slab multiple t is charged once for
the whole micro-batch, `Alignment.bin_footprint(sum of segment footprints)`; the layout of
the merged micro-batch is `layout.compute_layout` of its segments. A slab that alone
exceeds the budget would be its own micro-batch over it, so a budget below the largest
slab's stripped footprint is refused up front (`check_budget`): the budget is how a user
bounds activation memory, and one silently exceeded is an OOM they believed it prevents. Every DP rank gets the same number of
micro-batches in a step: ranks with fewer get empty ones (zero tokens, zero loss), counted.
All of this is computed from per-slab scalars, so every rank can plan every rank's steps
and a resume at step k needs no token data.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from packtool.errors import PacktoolConfigError, arg
from packtool.align import Alignment
from packtool.layout import compute_layout, place_tokens
from packtool.slabs.reader import SlabIndex, SlabRow


@dataclass(frozen=True)
class StepPlan:
    """One optimizer step on one DP rank: micro-batches as lists of slab indices; an empty
    list is an empty (zero-loss) micro-batch that keeps the ranks in step."""

    step: int  # global step number
    epoch: int
    micro_batches: list[list[int]]

    @property
    def n_empty(self) -> int:
        return sum(1 for mb in self.micro_batches if not mb)


def epoch_order(index: SlabIndex, epoch: int, seed: int) -> np.ndarray:
    """Seeded permutation of all slabs: row groups shuffled, rows shuffled inside each."""
    rng = np.random.default_rng([seed, epoch])
    key = index.shard.astype(np.int64) << 32 | index.row_group.astype(np.int64)
    groups, inv = np.unique(key, return_inverse=True)
    g_rank = np.empty(groups.size, np.int64)
    g_rank[rng.permutation(groups.size)] = np.arange(groups.size)
    within = rng.random(len(index))
    return np.lexsort((within, g_rank[inv]))


def rank_steps(index: SlabIndex, dp: int, epoch: int, seed: int, grad_accum: int,
               planned: bool) -> list[list[list[int]]]:
    """steps[s][r] = slab indices of rank r in step s (in micro-batch order)."""
    if planned:
        steps = np.unique(index.step)
        rng = np.random.default_rng([seed, epoch])
        out = []
        for s in steps[rng.permutation(steps.size)]:
            sel = np.flatnonzero(index.step == s)
            per = []
            for r in range(dp):
                mine = sel[index.dp_rank[sel] == r]
                per.append(mine[np.argsort(index.microbatch[mine], kind="stable")].tolist())
            out.append(per)
        return out
    order = epoch_order(index, epoch, seed)
    streams = [order[r::dp] for r in range(dp)]
    n_steps = -(-max(len(s) for s in streams) // grad_accum) if len(order) else 0
    return [[streams[r][k * grad_accum:(k + 1) * grad_accum].tolist() for r in range(dp)]
            for k in range(n_steps)]


def group_by_budget(slabs: list[int], stripped: np.ndarray, align: Alignment,
                    budget: int | None) -> list[list[int]]:
    """Greedy merge of consecutive slabs while bin_footprint(sum stripped) <= budget."""
    if budget is None:
        return [[i] for i in slabs]
    out: list[list[int]] = []
    cur: list[int] = []
    acc = 0
    for i in slabs:
        need = int(align.bin_footprint(acc + int(stripped[i])))
        if cur and need > budget:
            out.append(cur)
            cur, acc = [], 0
        cur.append(i)
        acc += int(stripped[i])
    if cur:
        out.append(cur)
    return out


def check_budget(index: SlabIndex, align: Alignment, budget: int | None) -> None:
    """Every slab must fit `budget` alone (its stripped footprint, as `group_by_budget` charges it)."""
    if budget is None or len(index) == 0:
        return
    if budget < align.t:
        raise PacktoolConfigError(f"{arg('micro_batch_tokens', budget)} is below the per-slab multiple "
                                  f"t={align.t} ({align.describe()}): use at least {align.t}")
    big = int(align.bin_footprint(index.stripped).max())
    if budget < big:
        raise PacktoolConfigError(f"{arg('micro_batch_tokens', budget)} is below the largest slab, {big} tokens "
                                  f"(a micro-batch of its own, over the budget): give {arg('micro_batch_tokens', big)} "
                                  f"or more, or re-pack with {arg('capacity')} at most {budget}")


def plan_epoch(index: SlabIndex, align: Alignment, dp: int, rank: int, epoch: int, seed: int,
               grad_accum: int, budget: int | None, planned: bool,
               first_step: int) -> list[StepPlan]:
    if budget is not None and budget < align.t:
        raise PacktoolConfigError(f"{arg('micro_batch_tokens', budget)} is below the per-slab multiple "
                         f"t={align.t} ({align.describe()}): use at least {align.t}")
    plans = []
    for k, per_rank in enumerate(rank_steps(index, dp, epoch, seed, grad_accum, planned)):
        groups = [group_by_budget(s, index.stripped, align, budget) for s in per_rank]
        n = max(len(g) for g in groups)
        mine = groups[rank] + [[] for _ in range(n - len(groups[rank]))]
        plans.append(StepPlan(step=first_step + k, epoch=epoch, micro_batches=mine))
    return plans


@dataclass
class MergedTokens:
    """A full (all CP ranks) micro-batch: tokens and its segment layout."""

    input_ids: np.ndarray
    loss_mask: np.ndarray
    seg_len: np.ndarray
    seg_padded: np.ndarray
    side: dict = dataclasses.field(default_factory=dict)  # name -> [T] or [T, K], token-aligned


def merge_slabs(rows: list[SlabRow], align: Alignment, pad_id: int,
                restrip: bool, side_fill: dict | None = None) -> MergedTokens:
    """Concatenate slabs' real segments and charge the tail once (see module docstring).
    With `restrip` False a single slab is passed through as stored (fill segment kept).
    Side columns move with their tokens; new pads hold side_fill[name]."""
    if len(rows) == 1 and not restrip:
        r = rows[0]
        return MergedTokens(np.asarray(r.input_ids), np.asarray(r.loss_mask),
                            r.seq_lens.astype(np.int64), r.seg_padded, dict(r.side))
    lens, src_start, srcs_ids, srcs_mask, base = [], [], [], [], 0
    for r in rows:
        real = r.seq_lens > 0  # drops the fixed-length fill segment
        starts = np.concatenate(([0], np.cumsum(r.seg_padded)[:-1]))
        lens.append(r.seq_lens[real].astype(np.int64))
        src_start.append(starts[real] + base)
        srcs_ids.append(np.asarray(r.input_ids))
        srcs_mask.append(np.asarray(r.loss_mask))
        base += r.input_ids.size
    seg_len = np.concatenate(lens)
    src = np.concatenate(src_start)
    lay = compute_layout(seg_len, np.array([0, seg_len.size]),
                         dataclasses.replace(align, fixed_length=None))
    total = int(lay.slab_len[0])
    ids = np.full(total, pad_id, np.int32)
    mask = np.zeros(total, np.uint8)
    n = int(seg_len.sum())
    off = np.arange(n) - np.repeat(np.cumsum(seg_len) - seg_len, seg_len)
    dst = np.repeat(lay.seg_start, seg_len) + off
    s = np.repeat(src, seg_len) + off
    ids[dst] = np.concatenate(srcs_ids)[s]
    mask[dst] = np.concatenate(srcs_mask)[s]
    side = {name: place_tokens(np.concatenate([r.side[name] for r in rows])[s], dst, total,
                               (side_fill or {}).get(name, 0))
            for name in rows[0].side}
    return MergedTokens(ids, mask, lay.seg_len, lay.seg_padded, side)
