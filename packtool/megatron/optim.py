"""AdamW with fp32 master weights for bf16 models, global-norm clipping, LR schedule.

torch's AdamW on bf16 parameters loses small updates to rounding; megatron's own
mixed-precision optimizer needs its DDP grad buffers. This keeps an fp32 copy of every
parameter (the optimizer's), copies gradients into it, steps, and writes back.
With fp32 parameters the masters are the parameters themselves.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.distributed as dist


BETAS = (0.9, 0.95)


def lr_most(betas: tuple = BETAS) -> float:
    """The largest learning rate torch's AdamW takes (S38-5): its first step's size, lr / (1 -
    beta1), is converted to float32, so a larger lr failed at step 0 or 1 with torch's
    "value cannot be converted to type float without overflow" (said as a packtool bug)."""
    return float(torch.finfo(torch.float32).max) * (1 - betas[0])


def check_lr(value) -> float:
    """--lr: a finite number, 0 or from lr_least() to lr_most(), refused before any work."""
    from packtool.errors import PacktoolConfigError, arg, cli_flag
    from packtool.integers import short
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    if not (ok and math.isfinite(value) and 0 <= value <= lr_most()):
        raise PacktoolConfigError(f"{arg('lr')} must be a finite number from 0 to {lr_most():.3g} (AdamW holds "
                                  f"lr / (1 - beta1) in float32), got {short(value)}", flag=cli_flag("lr"))
    if 0 < value < lr_least():  # a step of 0 in float32: trained nothing without the note lr 0 gets (S40-10)
        raise PacktoolConfigError(f"{arg('lr')} {short(value)} is below float32's smallest normal number "
                                  f"{lr_least():.3g} (AdamW steps the weights in float32, where it is 0 or next "
                                  f"to it: the run would train nothing); give {arg('lr')} 0 or at least "
                                  f"{lr_least():.3g}", flag=cli_flag("lr"))
    return value


def lr_least() -> float:
    """The smallest positive learning rate taken: float32's smallest normal number. Below it the
    step lr * m / sqrt(v) and the decay lr * wd are 0 (or subnormal, flushed on GPUs) in float32."""
    return float(torch.finfo(torch.float32).tiny)


class MasterAdamW:
    def __init__(self, params: list[torch.nn.Parameter], lr: float, betas=BETAS,
                 weight_decay: float = 0.1, eps: float = 1e-8):
        self.params = [p for p in params if p.requires_grad]
        self.mixed = any(p.dtype != torch.float32 for p in self.params)
        if self.mixed:
            self.master = [p.detach().float().clone().requires_grad_(True) for p in self.params]
        else:
            self.master = self.params
        groups = [{"params": [m for m, p in zip(self.master, self.params) if p.dim() >= 2],
                   "weight_decay": weight_decay},
                  {"params": [m for m, p in zip(self.master, self.params) if p.dim() < 2],
                   "weight_decay": 0.0}]
        fused = bool(self.params) and self.params[0].is_cuda
        self.opt = torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused or None)

    def set_lr(self, lr: float) -> None:
        for g in self.opt.param_groups:
            g["lr"] = lr

    def step(self) -> None:
        if self.mixed:
            for m, p in zip(self.master, self.params):
                m.grad = None if p.grad is None else p.grad.float()
        self.opt.step()
        if self.mixed:
            with torch.no_grad():
                torch._foreach_copy_(self.params, self.master)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None
        if self.mixed:
            for m in self.master:
                m.grad = None

    def state_dict(self) -> dict:
        return {"opt": self.opt.state_dict(),
                "master": [m.detach().cpu() for m in self.master] if self.mixed else None}

    def load_state_dict(self, sd: dict) -> None:
        self.opt.load_state_dict(sd["opt"])
        if self.mixed and sd.get("master") is not None:
            with torch.no_grad():
                for m, s in zip(self.master, sd["master"]):
                    m.copy_(s)


def clip_grad_norm(params: list[torch.nn.Parameter], max_norm: float, tp_group: Any,
                   tp_rank: int) -> float:
    """Global L2 norm over the whole model (TP-sharded params summed over TP, replicated ones
    counted once); scales grads in place when it exceeds max_norm. Call after reduce_grads."""
    grads_sh = [p.grad for p in params if p.grad is not None
                and getattr(p, "tensor_model_parallel", False)]
    grads_rep = [p.grad for p in params if p.grad is not None
                 and not getattr(p, "tensor_model_parallel", False)]
    dev = (grads_sh or grads_rep)[0].device
    sq = torch.zeros((), dtype=torch.float32, device=dev)
    for g in grads_sh:
        sq += g.float().pow(2).sum()
    if tp_rank == 0:
        for g in grads_rep:
            sq += g.float().pow(2).sum()
    if tp_group is not None and dist.get_world_size(tp_group) > 1:
        dist.all_reduce(sq, group=tp_group)
    norm = float(sq.sqrt())
    if max_norm > 0 and norm > max_norm:
        torch._foreach_mul_(grads_sh + grads_rep, max_norm / (norm + 1e-6))
    return norm


def lr_at(step: int, base: float, warmup: int, total: int, floor: float = 0.1) -> float:
    """Linear warmup, then cosine decay to floor * base at `total`."""
    if warmup and step < warmup:
        return base * (step + 1) / warmup
    frac = min(1.0, (step - warmup) / max(1, total - warmup))
    return base * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * frac)))
