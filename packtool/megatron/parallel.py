"""Process groups and gradient reduction for `packtool train` (no megatron DDP wrapper).

Under torchrun every process joins one group (NCCL on CUDA, gloo on CPU) and megatron's
parallel_state splits it into TP x CP x DP. A plain `python` run on CPU becomes a world
of one over an in-memory gloo store, so megatron-core's layers find their groups.

Gradients: the loss of a step is already divided by the global number of loss tokens, so
gradients are SUMMED over DP x CP (each CP rank holds part of every segment's tokens).
With sequence parallelism, replicated parameters whose gradient comes from a token shard
(megatron marks them `sequence_parallel=True`: the norms) are summed over TP first.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from packtool.errors import PacktoolConfigError, arg
from packtool.params import torch_device


@dataclass(frozen=True)
class ParallelInfo:
    world: int
    rank: int
    tp: int
    cp: int
    dp: int
    tp_rank: int
    cp_rank: int
    dp_rank: int
    device: torch.device
    tp_group: Any
    cp_group: Any
    dp_group: Any
    dp_cp_group: Any

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_parallel(tp: int = 1, cp: int = 1, device: str = "cpu") -> ParallelInfo:
    from megatron.core import parallel_state as ps
    # before any process group: a bad device was torch's error (or, 'cuda:0', the CPU) after it
    cuda = torch_device("device", device).type == "cuda"
    if not dist.is_initialized():
        if "WORLD_SIZE" in os.environ:
            backend = "nccl" if cuda else "gloo"
            if cuda:
                torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
            dist.init_process_group(backend)
        else:
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    world = dist.get_world_size()
    if world % (tp * cp):
        raise PacktoolConfigError(f"world size {world} is not divisible by {arg('tp', tp)} x {arg('cp', cp)}: "
                                  f"launch a multiple of tp*cp={tp * cp} processes")
    if ps.model_parallel_is_initialized():
        if (ps.get_tensor_model_parallel_world_size() != tp
                or ps.get_context_parallel_world_size() != cp):
            ps.destroy_model_parallel()
    if not ps.model_parallel_is_initialized():
        ps.initialize_model_parallel(tensor_model_parallel_size=tp,
                                     context_parallel_size=cp)
    dev = (torch.device("cuda", torch.cuda.current_device()) if cuda
           else torch.device("cpu"))
    return ParallelInfo(
        world=world, rank=dist.get_rank(), tp=tp, cp=cp, dp=world // (tp * cp),
        tp_rank=ps.get_tensor_model_parallel_rank(), cp_rank=ps.get_context_parallel_rank(),
        dp_rank=ps.get_data_parallel_rank(), device=dev,
        tp_group=ps.get_tensor_model_parallel_group(),
        cp_group=ps.get_context_parallel_group(), dp_group=ps.get_data_parallel_group(),
        dp_cp_group=ps.get_data_parallel_group(with_context_parallel=True))


def _all_reduce_flat(grads: list[torch.Tensor], group: Any) -> None:
    if not grads:
        return
    flat = torch._utils._flatten_dense_tensors(grads)
    dist.all_reduce(flat, group=group)
    for g, f in zip(grads, torch._utils._unflatten_dense_tensors(flat, grads)):
        g.copy_(f)


def reduce_grads(params: list[torch.nn.Parameter], info: ParallelInfo) -> None:
    """Sum gradients over TP (sequence-parallel params only), then over DP x CP."""
    if info.tp > 1:
        sp = [p.grad for p in params if p.grad is not None and getattr(p, "sequence_parallel", False)]
        _all_reduce_flat(sp, info.tp_group)
    if info.dp * info.cp > 1:
        _all_reduce_flat([p.grad for p in params if p.grad is not None], info.dp_cp_group)


def all_reduce_sum(values: list[float], group: Any, device: torch.device) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device=device)
    if group is not None and dist.get_world_size(group) > 1:
        dist.all_reduce(t, group=group)
    return t.tolist()
