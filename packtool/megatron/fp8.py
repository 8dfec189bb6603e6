"""FP8 linear layers for `packtool train --fp8`: megatron's Column/RowParallelLinear with FP8
GEMMs in fprop, dgrad and wgrad.

The GEMM math (quantizers, torch._scaled_mm, the fp32 reference) is `packtool/kernels/fp8.py`. This
module owns the megatron wiring and the checks around it:
  - `Fp8ColumnParallelLinear` / `Fp8RowParallelLinear` replace `_forward_impl` (megatron's
    `linear_with_grad_accumulation_and_async_allreduce`) and nothing else, so TP, SP, bias
    handling and the state_dict stay megatron's. With SP the input is all-gathered in bf16
    and quantized after the gather; dgrad is reduce-scattered (SP) or all-reduced (TP) in
    bf16, as megatron does.
  - weights stay bf16 parameters with fp32 masters in the optimizer; each forward quantizes
    them afresh (current scaling), so nothing FP8 is ever stored across steps.
  - the token count of every GEMM is checked against packtool.align's FP8 multiple before
    any kernel runs: a slab packed for another layout fails with AlignmentError (one line),
    never with a cuBLAS error or, worse, a silently wrong product.
The LM head (GPTModel's output_layer) is built by GPTModel itself, not from the layer spec,
so it stays bf16.
"""
from __future__ import annotations

import functools
from typing import Any

import torch
from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear

from packtool.kernels import fp8 as kfp8
from packtool.align import AlignmentError, fp8_token_multiple
from packtool.errors import PacktoolConfigError, arg, bad_choice

TRAIN_RECIPES = ("tensorwise", "blockwise")


def check_recipe(fp8: str, device: str) -> None:
    """Refuse recipes this build cannot run, in one line naming the fix."""
    if fp8 == "none" or (fp8 in TRAIN_RECIPES and device == "cpu"):
        return  # CPU runs the fp32 reference of the same quantization (tests, smoke runs)
    if fp8 == "mxfp8":
        raise AlignmentError(
            f"{arg('fp8', 'mxfp8')}: MXFP8 GEMMs (1x32 blocks, e8m0 scales) need a Blackwell GPU; "
            "cuBLASLt has no MXFP8 kernel for Hopper (CUBLAS_STATUS_NOT_SUPPORTED on an H200): "
            f"train with {arg('fp8', 'tensorwise')} or {arg('fp8', 'blockwise')}")
    if fp8 not in TRAIN_RECIPES:
        raise bad_choice(AlignmentError, "fp8", fp8, ("none", *TRAIN_RECIPES))
    cap = torch.cuda.get_device_capability() if torch.cuda.is_available() else (0, 0)
    if cap < (8, 9):
        raise AlignmentError(f"{arg('fp8', fp8)}: FP8 GEMMs need compute capability 8.9 or newer "
                             f"(this GPU: {cap[0]}.{cap[1]}): train with {arg('fp8', 'none')}")


def check_shape(fp8: str, hidden: int, ffn: int, qkv: int, tp: int = 1) -> None:
    """The weight dims the FP8 GEMMs accept. blockwise: cuBLASLt reads each row of a 128x128
    weight-scale grid at a 16-byte aligned stride while torch._scaled_mm demands the exact
    stride, so the block count along both weight dims must be a multiple of 4; with K=256
    the product came back silently wrong on the H200 (BENCHMARKS.md "FP8 training")."""
    m = {"none": 1, "tensorwise": 16, "blockwise": 512}.get(fp8, 1)
    dims = ((arg("hidden"), hidden), (f"{arg('hidden')} / {arg('tp')}", hidden // tp),
            (f"{arg('ffn')} / {arg('tp')}", ffn // tp),
            ("q/k/v projection / tp", qkv // tp))
    bad = [f"{k}={v}" for k, v in dims if v % m]
    if bad:
        raise PacktoolConfigError(f"{arg('fp8', fp8)} needs every linear dimension to be a multiple of {m}; "
                         f"got {', '.join(bad)}")


def check_tokens(n: int, fp8: str) -> None:
    r = fp8_token_multiple(fp8)
    if n % r:
        raise AlignmentError(
            f"FP8 {fp8} GEMM on {n} local tokens: the local (per CP rank, SP-gathered) token "
            f"count must be a multiple of {r} (wgrad reduces over tokens): pack with "
            f"`packtool pack ... --fp8 {fp8}` and the training {arg('tp')}/{arg('cp')}")


class _Fp8Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, recipe, impl, sequence_parallel, allreduce_dgrad, tp_group,
                w_ops):
        total = _sp_gather(x, tp_group) if sequence_parallel else x
        x2 = total.reshape(-1, total.shape[-1])
        check_tokens(x2.shape[0], recipe)
        y, saved = kfp8.fprop(x2, weight, recipe, impl, w_ops)
        # quantized operands (1 byte per element) instead of the bf16 input: wgrad reuses
        # them, and with SP the gathered input need not be gathered again in backward
        ctx.saved, ctx.recipe, ctx.impl = saved, recipe, impl
        ctx.sp, ctx.allreduce, ctx.group = sequence_parallel, allreduce_dgrad, tp_group
        ctx.in_shape, ctx.w_dtype = total.shape, weight.dtype
        return y.view(*total.shape[:-1], y.shape[-1])

    @staticmethod
    def backward(ctx, gy):
        g2 = gy.reshape(-1, gy.shape[-1]).contiguous()
        dx, dw = kfp8.backward(g2, ctx.saved, ctx.recipe, ctx.impl)
        ctx.saved = None
        dx = dx.view(ctx.in_shape)
        if ctx.sp:
            dx = _sp_reduce_scatter(dx, ctx.group)
        elif ctx.allreduce:
            torch.distributed.all_reduce(dx, group=ctx.group)
        return dx, dw.to(ctx.w_dtype), None, None, None, None, None, None


def _sp_gather(x: torch.Tensor, group) -> torch.Tensor:
    n = group.size()
    if n == 1:
        return x
    out = torch.empty((x.shape[0] * n, *x.shape[1:]), dtype=x.dtype, device=x.device)
    torch.distributed.all_gather_into_tensor(out, x.contiguous(), group=group)
    return out


def _sp_reduce_scatter(x: torch.Tensor, group) -> torch.Tensor:
    n = group.size()
    if n == 1:
        return x
    out = torch.empty((x.shape[0] // n, *x.shape[1:]), dtype=x.dtype, device=x.device)
    torch.distributed.reduce_scatter_tensor(out, x.contiguous(), group=group)
    return out


def fp8_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, recipe: str,
               impl: str, sequence_parallel: bool = False, allreduce_dgrad: bool = False,
               tp_group: Any = None, w_ops: Any = None) -> torch.Tensor:
    out = _Fp8Linear.apply(x, weight, recipe, impl, sequence_parallel, allreduce_dgrad, tp_group,
                           w_ops)
    return out if bias is None else out + bias


class _Fp8ImplMixin:
    fp8_recipe = "tensorwise"
    _w_cache: Any = None

    def _weight_operands(self, weight: torch.Tensor) -> Any:
        # quantize the weight once per optimizer step, not once per micro-batch: the step's
        # in-place copy from the fp32 masters (and load_state_dict) bumps weight._version
        key = (weight.data_ptr(), weight._version)
        if self._w_cache is None or self._w_cache[0] != key:
            self._w_cache = (key, kfp8.weight_operands(weight.detach(), self.fp8_recipe))
        return self._w_cache[1]

    def _forward_impl(self, input, weight, bias=None, gradient_accumulation_fusion=False,
                      allreduce_dgrad=False, sequence_parallel=False, grad_output_buffer=None,
                      wgrad_deferral_limit=None, tp_group=None, **_: Any):
        impl = "scaled_mm" if input.is_cuda else "reference"
        return fp8_linear(input, weight, bias, self.fp8_recipe, impl, sequence_parallel,
                          allreduce_dgrad, tp_group, self._weight_operands(weight))


class Fp8ColumnParallelLinear(_Fp8ImplMixin, ColumnParallelLinear):
    """megatron ColumnParallelLinear whose GEMMs run in FP8 (recipe: `fp8_recipe`)."""


class Fp8RowParallelLinear(_Fp8ImplMixin, RowParallelLinear):
    """megatron RowParallelLinear whose GEMMs run in FP8 (recipe: `fp8_recipe`)."""


@functools.cache
def linear_classes(recipe: str) -> tuple[type, type]:
    """(column, row) parallel linear classes for `recipe`, for a megatron layer spec."""
    if recipe not in TRAIN_RECIPES:
        raise AlignmentError(f"no FP8 linear for recipe {recipe!r}")
    col = type(f"Fp8ColumnParallelLinear_{recipe}", (Fp8ColumnParallelLinear,),
               {"fp8_recipe": recipe})
    row = type(f"Fp8RowParallelLinear_{recipe}", (Fp8RowParallelLinear,), {"fp8_recipe": recipe})
    return col, row


def apply_to_layer_spec(layer: Any, recipe: str) -> None:
    """Swap the four linears of a `get_gpt_layer_local_spec()` layer for FP8 ones."""
    col, row = linear_classes(recipe)
    attn, mlp = layer.submodules.self_attention.submodules, layer.submodules.mlp.submodules
    attn.linear_qkv, attn.linear_proj = col, row
    mlp.linear_fc1, mlp.linear_fc2 = col, row
