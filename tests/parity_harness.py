"""Strict multi-rank parity: one training step of a layout (DP, TP+SP, CP, TP x CP) against
one rank, on the same weights and the same sequences.

The one-rank run is the reference: its full (TP=1) weights are saved, and every layout's
model is loaded with them, TP shards CUT from those full tensors (`cut_param`), never drawn
from the layout's own RNG streams. Each layout reads slabs packed for its own alignment
(`packtool.align.Alignment(tp, cp, sp)`, checked by `verify`: `parity_data.py`) holding
the same sequences as the reference's one-rank slabs. One step covers every slab, so the
loss (a token mean) and the gradients are the same quantity on every layout up to
summation order; gradients are gathered back to full shape (`gather_full_grads`) and
compared group by group.

The step mirrors `loop.train`'s (loss over the step's global loss tokens, one backward per
micro-batch, `parallel.reduce_grads`, loss all-reduced over DP x CP) without the update.

Tolerance (`tolerance`): two summation orders of the same n terms in a precision with unit
roundoff u differ by about u*sqrt(n) relative (rounding errors as a random walk); the check
allows 4x that (about 3 sigma), relative to the group's largest reference gradient.
  fp32 (CPU: every product and reduction accumulates in fp32): n = the longest reduction
    whose order a layout changes, max(loss tokens of the step, vocabulary) (weight gradients
    sum over tokens; the softmax normalizer over the vocabulary).
  bf16 (GPU: matmuls accumulate in fp32, so the long reductions cost fp32 error only; the
    order-dependent error is the bf16 roundings of partial results): n = micro-batches
    accumulated into one bf16 gradient + ranks in its all-reduce + 4 per layer (the
    row-parallel partial sums rounded before their TP all-reduce, forward and backward, in
    attention and MLP).
The reference also measures its own floor: the same step with the micro-batches in reverse
order, which changes nothing but summation order. `PLANTED_BUGS` are layout bugs the check
must fail (the self-check that it can).

CPU ranks: `cpu_buffers` lets megatron's sequence parallelism run under gloo on a CPU-only
torch build (see there); nothing else differs from a GPU run but dtype and kernels.
"""
from __future__ import annotations

import math
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from packtool.align import Alignment
from packtool.megatron.dataset import PackedSlabDataset
from packtool.megatron.model import GPTShape, build_gpt, loss_sum
from packtool.megatron.optim import clip_grad_norm
from packtool.megatron.parallel import ParallelInfo, all_reduce_sum, init_parallel, reduce_grads

GROUPS = ("embedding", "qkv", "proj", "fc1", "fc2", "norms", "output")
UNIT_ROUNDOFF = {torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -8}


@dataclass(frozen=True)
class Layout:
    """A parallel layout; DP is whatever the world leaves after TP x CP."""

    name: str
    world: int
    tp: int = 1
    cp: int = 1
    sp: bool = False

    @property
    def dp(self) -> int:
        return self.world // (self.tp * self.cp)

    def alignment(self, capacity: int) -> Alignment:
        return Alignment(tp=self.tp, cp=self.cp, sp=self.sp, capacity=capacity)

    def describe(self) -> str:
        parts = [f"DP={self.dp}"] if self.dp > 1 else []
        parts += [f"TP={self.tp}" + ("+SP" if self.sp else "")] if self.tp > 1 else []
        parts += [f"CP={self.cp}"] if self.cp > 1 else []
        return " x ".join(parts) or "1 rank"


LAYOUTS = {
    "1": Layout("1", 1),
    "dp2": Layout("dp2", 2),
    "tp2sp": Layout("tp2sp", 2, tp=2, sp=True),
    "cp2": Layout("cp2", 2, cp=2),
    "tp2cp2": Layout("tp2cp2", 4, tp=2, cp=2, sp=True),
}

_LAYOUT_NAME = re.compile(r"^(?:dp(\d+))?(?:tp(\d+)(sp)?)?(?:cp(\d+))?$")


def parse_layout(name: str, world: int | None = None) -> Layout:
    """A name of LAYOUTS, or any `[dpN][tpN[sp]][cpN]` ('dp4', 'tp4sp', 'tp2spcp2',
    'dp2tp2sp'); DP defaults to what `world` leaves after TP x CP."""
    if name in LAYOUTS and world in (None, LAYOUTS[name].world):
        return LAYOUTS[name]
    m = _LAYOUT_NAME.match(name)
    if not name or m is None:
        raise ValueError(f"layout {name!r}: use one of {', '.join(LAYOUTS)} or "
                         f"[dpN][tpN[sp]][cpN], e.g. tp4sp or dp2tp2spcp2")
    tp, cp = int(m.group(2) or 1), int(m.group(4) or 1)
    dp = int(m.group(1)) if m.group(1) else (world or tp * cp) // (tp * cp)
    lay = Layout(name, dp * tp * cp, tp=tp, cp=cp, sp=bool(m.group(3)))
    if world is not None and lay.world != world:
        raise ValueError(f"layout {name!r} needs {lay.world} ranks, this world has {world}")
    return lay


def param_group(name: str) -> str:
    for key, group in (("word_embeddings", "embedding"), ("linear_qkv", "qkv"),
                       ("linear_proj", "proj"), ("linear_fc1", "fc1"), ("linear_fc2", "fc2"),
                       ("output_layer", "output"), ("layernorm", "norms")):
        if key in name:
            return group
    raise ValueError(f"parameter {name}: no parity group (add it to param_group)")


# --- weights: full <-> TP shards ---------------------------------------------------------

def _is_gated_fc1(name: str, model: Any) -> bool:
    return name.endswith("linear_fc1.weight") and bool(model.config.gated_linear_unit)


def cut_param(full: torch.Tensor, name: str, param: torch.nn.Parameter, model: Any, tp: int,
              tp_rank: int) -> torch.Tensor:
    """This TP rank's shard of a full (TP=1) tensor, as megatron's forward reads it."""
    if not getattr(param, "tensor_model_parallel", False) or tp == 1:
        return full
    dim = param.partition_dim
    if _is_gated_fc1(name, model):  # SwiGLU: rank r holds [gate rows r; up rows r]
        gate, up = full.chunk(2, dim=dim)
        return torch.cat([gate.chunk(tp, dim=dim)[tp_rank], up.chunk(tp, dim=dim)[tp_rank]],
                         dim=dim)
    return full.chunk(tp, dim=dim)[tp_rank]


def uncut(parts: list[torch.Tensor], name: str, param: torch.nn.Parameter,
          model: Any) -> torch.Tensor:
    """Inverse of `cut_param`: the full tensor from every TP rank's shard."""
    dim = param.partition_dim
    if _is_gated_fc1(name, model):
        halves = [p.chunk(2, dim=dim) for p in parts]
        return torch.cat([h[0] for h in halves] + [h[1] for h in halves], dim=dim)
    return torch.cat(parts, dim=dim)


def naive_fc1_cut(full: torch.Tensor, name: str, param: torch.nn.Parameter, model: Any,
                  tp: int, tp_rank: int) -> torch.Tensor:
    """A planted bug (harness self-check): every sharded tensor cut in contiguous chunks,
    so with SwiGLU rank 0 holds all the gate rows of fc1 and rank 1 all the up rows."""
    if not getattr(param, "tensor_model_parallel", False) or tp == 1:
        return full
    return full.chunk(tp, dim=param.partition_dim)[tp_rank]


def unreduced_norms_cut(full: torch.Tensor, name: str, param: torch.nn.Parameter, model: Any,
                        tp: int, tp_rank: int) -> torch.Tensor:
    """A planted bug (harness self-check): the norm weights lose megatron's
    `sequence_parallel` mark, so reduce_grads never sums their token-shard gradients over TP."""
    if "layernorm" in name:
        param.sequence_parallel = False
    return cut_param(full, name, param, model, tp, tp_rank)


PLANTED_BUGS = {"naive-fc1": naive_fc1_cut, "unreduced-norms": unreduced_norms_cut}


def load_full_weights(model: Any, full: dict[str, torch.Tensor], info: ParallelInfo,
                      cut=cut_param) -> None:
    """Copy this rank's cut of the full weights into `model` (every parameter, or raise)."""
    names = dict(model.named_parameters())
    missing = sorted(set(names) ^ set(full))
    if missing:
        raise KeyError(f"full weights and the TP={info.tp} model disagree on {missing[:4]}")
    with torch.no_grad():
        for name, p in names.items():
            shard = cut(full[name], name, p, model, info.tp, info.tp_rank)
            if shard.shape != p.shape:
                raise ValueError(f"{name}: cut {tuple(shard.shape)} != shard {tuple(p.shape)}")
            p.copy_(shard.to(p.device, p.dtype))


def gather_full_grads(model: Any, info: ParallelInfo) -> dict[str, torch.Tensor]:
    """Every parameter's gradient at full shape, on every rank (a TP all-gather per
    sharded parameter; DP/CP replicas are identical after reduce_grads)."""
    out = {}
    for name, p in model.named_parameters():
        g = p.grad.detach()
        if info.tp > 1 and getattr(p, "tensor_model_parallel", False):
            parts = [torch.empty_like(g) for _ in range(info.tp)]
            dist.all_gather(parts, g.contiguous(), group=info.tp_group)
            g = uncut(parts, name, p, model)
        out[name] = g.float().cpu()
    return out


@contextmanager
def cpu_buffers(device: str):
    """Lets megatron-core 0.16.1's sequence parallelism run on CPU ranks (gloo) of a
    CPU-only torch build, for the duration; anywhere else it changes nothing. Two things
    stop it there:
      - SP communication buffers (mappings, layers, GlobalMemoryBuffer) are allocated on
        `torch.cuda.current_device()`, used only as `device=`: it answers 'cpu' here;
      - the SP embedding runs its (p=0) dropout inside `get_cuda_rng_tracker().fork()`:
        megatron's own inference tracker (`inference_rng_tracker=True`, a no-op fork) is
        installed, and the previous tracker put back after."""
    if device != "cpu" or torch.cuda.is_available():
        yield
        return
    from megatron.core.tensor_parallel import random as mrandom
    saved = (torch.cuda.current_device, mrandom._CUDA_RNG_STATE_TRACKER,
             mrandom._CUDA_RNG_STATE_TRACKER_INITIALIZED)
    torch.cuda.current_device = lambda: "cpu"
    mrandom.initialize_rng_tracker(inference_rng_tracker=True, force_reset=True)
    try:
        yield
    finally:
        (torch.cuda.current_device, mrandom._CUDA_RNG_STATE_TRACKER,
         mrandom._CUDA_RNG_STATE_TRACKER_INITIALIZED) = saved


# --- one step ----------------------------------------------------------------------------

@dataclass
class StepOut:
    loss: float
    loss_tokens: int
    micro_batches: int  # on this rank
    grad_norm: float
    grads: dict[str, torch.Tensor] = field(repr=False)


def one_step(model: Any, data: str, info: ParallelInfo, lm_head: str = "torch",
             reverse: bool = False, seed: int = 0) -> StepOut:
    """One step over EVERY slab of `data` (round-robin over DP), as `loop.train` takes it."""
    probe = PackedSlabDataset(data, cp_size=info.cp)
    per_rank = -(-len(probe.index) // info.dp)  # one step holds the whole output
    ds = PackedSlabDataset(data, dp_rank=info.dp_rank, dp_size=info.dp, cp_rank=info.cp_rank,
                           cp_size=info.cp, seed=seed, grad_accum=per_rank, device=info.device,
                           cp_group=info.cp_group, dp_group=info.dp_group if info.dp > 1 else None)
    st = next(ds.steps(max_steps=1))
    params = list(model.parameters())
    model.zero_grad(set_to_none=True)
    n_loss = st.global_loss_tokens(device=info.device)
    acc = torch.zeros((), dtype=torch.float64, device=info.device)
    mbs = [mb for mb in st.micro_batches if mb is not None]
    for mb in (mbs[::-1] if reverse else mbs):
        ls = loss_sum(model, mb, lm_head, tp_group=info.tp_group)
        (ls / n_loss).backward()
        acc += ls.detach().double()
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    reduce_grads(params, info)
    norm = clip_grad_norm(params, 0.0, info.tp_group, info.tp_rank)  # 0: measure, no clip
    total = all_reduce_sum([float(acc)], info.dp_cp_group, info.device)[0]
    return StepOut(total / n_loss, n_loss, len(mbs), norm, gather_full_grads(model, info))


# --- comparison --------------------------------------------------------------------------

def group_errors(ref: dict[str, torch.Tensor], got: dict[str, torch.Tensor]) -> dict[str, float]:
    """max |got - ref| / max |ref| over each group's parameters (all layers together)."""
    diff: dict[str, float] = {}
    scale: dict[str, float] = {}
    for name, r in ref.items():
        g = param_group(name)
        d = float((got[name].double() - r.double()).abs().max())
        diff[g] = max(diff.get(g, 0.0), d)
        scale[g] = max(scale.get(g, 0.0), float(r.double().abs().max()))
    return {g: diff[g] / scale[g] if scale[g] > 0 else diff[g] for g in GROUPS if g in diff}


def tolerance(dtype: torch.dtype, loss_tokens: int, vocab: int, layers: int,
              micro_batches: int, ranks: int) -> tuple[float, str]:
    """(tolerance, its derivation in words); see the module docstring."""
    u = UNIT_ROUNDOFF[dtype]
    if dtype == torch.float32:
        n, why = max(loss_tokens, vocab), f"max(loss tokens {loss_tokens}, vocab {vocab})"
    else:
        n = micro_batches + ranks + 4 * layers
        why = f"{micro_batches} micro-batches + {ranks} ranks + 4 x {layers} layers"
    tol = 4 * u * math.sqrt(n)
    return tol, f"4 u sqrt(n), u={u:.3g}, n={n} ({why}) = {tol:.2e}"


@dataclass
class Reference:
    shape: GPTShape
    dtype: torch.dtype
    weights: dict[str, torch.Tensor]
    step: StepOut
    floor: dict[str, float]  # group errors of the same step in reverse micro-batch order
    floor_loss: float

    def save(self, path: str) -> None:
        torch.save({"shape": self.shape.__dict__, "dtype": str(self.dtype),
                    "weights": self.weights, "step": self.step.__dict__, "floor": self.floor,
                    "floor_loss": self.floor_loss}, path)

    @classmethod
    def load(cls, path: str) -> "Reference":
        d = torch.load(path, map_location="cpu", weights_only=False)
        return cls(GPTShape(**d["shape"]), getattr(torch, d["dtype"].split(".")[-1]),
                   d["weights"], StepOut(**d["step"]), d["floor"], d["floor_loss"])


def run_reference(shape: GPTShape, data: str, device: str = "cpu",
                  dtype: torch.dtype = torch.float32, seed: int = 0,
                  lm_head: str = "torch") -> Reference:
    """The one-rank step (a world of one) on `data`; its weights become everyone's."""
    info = init_parallel(1, 1, device)
    if info.world != 1:
        raise ValueError(f"the reference runs on one rank; this world has {info.world}")
    model = build_gpt(shape, device=device, dtype=dtype, seed=seed)
    weights = {k: p.detach().cpu().clone() for k, p in model.named_parameters()}
    step = one_step(model, data, info, lm_head, seed=seed)
    rev = one_step(model, data, info, lm_head, reverse=True, seed=seed)
    return Reference(shape, dtype, weights, step, group_errors(step.grads, rev.grads),
                     abs(rev.loss - step.loss))


@dataclass
class ParityRow:
    layout: str
    ranks: int
    loss: float
    loss_diff: float
    grad_norm_rel: float
    errors: dict[str, float]
    tol: float
    tol_why: str
    floor: dict[str, float]

    @property
    def max_error(self) -> float:
        return max(self.errors.values())

    @property
    def passed(self) -> bool:
        return self.max_error <= self.tol and self.loss_diff <= self.tol * max(1.0, abs(self.loss))


def run_layout(layout: Layout, ref: Reference, data: str, device: str = "cpu",
               lm_head: str = "torch", seed: int = 0, cut=cut_param) -> ParityRow | None:
    """The layout's step on its slabs with the reference's weights; the row on rank 0
    (None elsewhere). `cut` exists so a test can plant a sharding bug."""
    info = init_parallel(layout.tp, layout.cp, device)
    if info.world != layout.world:
        raise ValueError(f"layout {layout.name} ({layout.describe()}) needs {layout.world} "
                         f"ranks, this world has {info.world}")
    with cpu_buffers(device):
        model = build_gpt(ref.shape, device=device, dtype=ref.dtype, tp=layout.tp,
                          cp=layout.cp, sp=layout.sp, seed=seed)
        load_full_weights(model, ref.weights, info, cut=cut)
        got = one_step(model, data, info, lm_head, seed=seed)
    if not info.is_main:
        return None
    r = ref.step
    tol, why = tolerance(ref.dtype, r.loss_tokens, ref.shape.vocab, ref.shape.layers,
                         r.micro_batches, layout.world)
    return ParityRow(layout.describe(), layout.world, got.loss, abs(got.loss - r.loss),
                     abs(got.grad_norm - r.grad_norm) / r.grad_norm,
                     group_errors(r.grads, got.grads), tol, why, ref.floor)


def reference_row(ref: Reference) -> ParityRow:
    r = ref.step
    tol, why = tolerance(ref.dtype, r.loss_tokens, ref.shape.vocab, ref.shape.layers,
                         r.micro_batches, 1)
    return ParityRow("1 rank (reverse order)", 1, r.loss, ref.floor_loss, 0.0, ref.floor, tol, why,
                     ref.floor)


def format_table(rows: list[ParityRow]) -> str:
    """Markdown: one row per layout; errors are max|g - g_ref| / max|g_ref| per group."""
    head = ("| layout | ranks | loss | abs loss diff | grad-norm rel diff | "
            + " | ".join(GROUPS) + " | tolerance | result |")
    lines = [head, "|" + "---|" * (7 + len(GROUPS))]
    for r in rows:
        errs = " | ".join(f"{r.errors[g]:.1e}" if g in r.errors else "-" for g in GROUPS)
        lines.append(f"| {r.layout} | {r.ranks} | {r.loss:.6f} | {r.loss_diff:.1e} | "
                     f"{r.grad_norm_rel:.1e} | {errs} | {r.tol:.1e} | "
                     f"{'pass' if r.passed else 'FAIL'} |")
    return "\n".join(lines)
