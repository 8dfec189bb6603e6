"""Tensor-parallel vocab sharding: each rank holds weight rows [start, start + V_local).

Per-row statistics from each shard merge exactly: the max is all-reduced first, every rank rescales
its sums to the common max, and sum-exp, the shifted entropy numerator and the target logit (zero
on ranks that do not own the target) are all-reduced together in one call. With no group the
merge is the identity, so single-GPU and TP runs share one code path.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from packtool.errors import PacktoolInputError

if TYPE_CHECKING:  # row_stats imports triton; the shard itself is plain torch (support_logprob's CPU path)
    from packtool.kernels.row_stats import RowStats


@dataclass(frozen=True)
class SoftmaxRows:
    lse: torch.Tensor  # fp32 [R]: log-sum-exp of z over the whole vocab
    entropy: torch.Tensor  # fp32 [R]: entropy of softmax(z)
    z_target: torch.Tensor  # fp32 [R]: z at the target


@dataclass(frozen=True)
class VocabShard:
    group: object | None  # torch.distributed process group, or None for no sharding
    start: int  # first vocab id held by this rank
    size: int  # rows of this rank's weight
    total: int  # vocab size over all ranks

    @staticmethod
    def of(weight: torch.Tensor, group=None) -> "VocabShard":
        v_local = weight.shape[0]
        if group is None:
            _refuse_unnamed_slice(weight)
            return VocabShard(group=None, start=0, size=v_local, total=v_local)
        # Megatron pads the vocab so that every rank holds the same number of rows.
        world = dist.get_world_size(group)
        return VocabShard(group, dist.get_rank(group) * v_local, v_local, v_local * world)

    def local_targets(self, targets: torch.Tensor) -> torch.Tensor:
        """Global target ids -> indices into this shard, -1 where another rank owns the target."""
        if self.group is None:
            return targets
        local = targets - self.start
        inside = (local >= 0) & (local < self.size)
        return torch.where(inside, local, torch.full_like(local, -1))

    def all_reduce_sum_(self, t: torch.Tensor) -> torch.Tensor:
        if self.group is not None:
            dist.all_reduce(t, op=dist.ReduceOp.SUM, group=self.group)
        return t


def _megatron_tp_size() -> int:
    """megatron-core's TP world size where its groups are set up, else 1. Looked up in sys.modules:
    the kernels never import megatron (a plain torch caller may not have it)."""
    ps = sys.modules.get("megatron.core.parallel_state")
    if ps is None or getattr(ps, "_TENSOR_MODEL_PARALLEL_GROUP", None) is None:
        return 1
    return int(ps.get_tensor_model_parallel_world_size())


def _refuse_unnamed_slice(weight) -> None:
    # A TP rank's output weight holds rows [rank * V/TP, (rank + 1) * V/TP): read without the group
    # as ids from 0, rank 0 blames the data for ids above its half and rank 1 silently scores
    # other tokens. Megatron marks the vocab-split weight (partition_dim 0), at TP 1 too, so the
    # mark counts only while its TP group is larger than one.
    if not (getattr(weight, "tensor_model_parallel", False) and getattr(weight, "partition_dim", -1) == 0):
        return
    tp = _megatron_tp_size()
    if tp > 1:
        v = weight.shape[0]
        raise PacktoolInputError(
            f"weight {tuple(weight.shape)} is this TP rank's vocab slice ({v} of {v * tp} rows, megatron's "
            "tensor_model_parallel) and no tp_group was given: pass "
            "tp_group=parallel_state.get_tensor_model_parallel_group()")


def merge_row_stats(stats: RowStats, shard: VocabShard) -> SoftmaxRows:
    m, s, u, zt = stats.m, stats.s, stats.u, stats.zt
    if shard.group is not None:
        m_all = m.clone()
        dist.all_reduce(m_all, op=dist.ReduceOp.MAX, group=shard.group)
        # s >= 1 on every shard (its own max contributes exp(0)), so the rescale is finite.
        scale = torch.exp(m - m_all)
        packed = torch.stack([scale * s, scale * (u + (m - m_all) * s), zt])
        dist.all_reduce(packed, op=dist.ReduceOp.SUM, group=shard.group)
        s, u, zt = packed[0], packed[1], packed[2]
        m = m_all
    log_s = torch.log(s)
    return SoftmaxRows(lse=m + log_s, entropy=log_s - u / s, z_target=zt)
