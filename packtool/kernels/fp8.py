"""FP8 GEMMs for the transformer's linear layers: quantizers, the scaled matmul, a torch reference.

Every GEMM of a linear y = x W^T (x [T, K], W [N, K], g = dL/dy [T, N]) is written as
A [M, R] @ B [P, R]^T with both operands quantized along the reduction dim R:

    fprop  y  = x   . W^T      A = x   [T, K]   B = W   [N, K]
    dgrad  dx = g   . (W^T)^T  A = g   [T, N]   B = W^T [K, N]
    wgrad  dW = g^T . (x^T)^T  A = g^T [N, T]   B = x^T [K, T]

so the token count T is M in fprop/dgrad and the reduction dim R in wgrad. That is the
"TN" layout cuBLASLt's FP8 kernels take (mat1 row-major, mat2 column-major): `mm` passes
A as mat1 and B^T (a column-major view of B) as mat2.

Recipes (Hopper, current scaling: scales from this tensor's amax now, no history):
  tensorwise  one fp32 scale per tensor; e4m3 activations and weights, e5m2 gradients.
  blockwise   DeepSeek-V3: 1x128 blocks along R for activations and gradients, 128x128
              blocks for weights; e4m3 everywhere.
mxfp8 (1x32 blocks, e8m0 scales) is Blackwell-only in cuBLASLt and is not built here.

`impl="scaled_mm"` runs torch._scaled_mm (cuBLASLt); `impl="reference"` dequantizes to fp32
and multiplies (CPU tests, and the yardstick of the GPU tests).

Quantizers: `_tensor_q` / `_rows_q` / `_tiles_q` below are the reference. On CUDA the
activations, gradients and weights go through packtool/kernels/fp8_quant.py's Triton kernels, which
read x once and write the operand and its transpose (wgrad's), bit-exact with the reference;
PACKTOOL_FP8_QUANT=compiled runs the torch.compile'd reference instead (bench comparisons). Shape rules are the
caller's: packtool/megatron/fp8.py asks packtool.align before calling in.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from packtool.kernels.fp8_format import BLOCK, E4M3, E5M2, FMAX, INV_FMAX  # noqa: F401 (re-exported)
from packtool.env import FP8_QUANT, FP8_TRANSPOSE, env_choice, env_flag
from packtool.errors import PacktoolInputError

RECIPES = ("tensorwise", "blockwise")


@dataclass
class Q:
    """A quantized operand: `data` [rows, R] row-major, `scale` the fp32 dequantization
    factors (x ~ data * scale), `kind` 'tensor' (0-dim scale), '1x128' ([rows, ceil(R/128)])
    or '128x128' ([ceil(rows/128), ceil(R/128)])."""
    data: torch.Tensor
    scale: torch.Tensor
    kind: str

    def t(self) -> Q:
        """The transposed operand; only tensor and 128x128 scalings survive a transpose."""
        if self.kind == "1x128":
            raise PacktoolInputError("a 1x128-scaled operand must be re-quantized, not transposed")
        with _range("fp8_quant"):
            s = self.scale if self.kind == "tensor" else self.scale.t().contiguous()
            return Q(self.data.t().contiguous(), s, self.kind)


def _tensor_q(x: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    amax = x.abs().amax().float()
    # reciprocal, then multiply: what `FMAX / amax` always ran as (Tensor.__rtruediv__),
    # spelled out so the Triton quantizers can match it bit for bit
    scale = torch.where(amax > 0, amax.reciprocal() * FMAX[dtype], torch.ones_like(amax))
    q = (x.float() * scale).clamp(-FMAX[dtype], FMAX[dtype]).to(dtype)
    return q, scale.reciprocal()


def _rows_q(x: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    # 1x128 blocks along the last dim; a ragged last block is zero-padded for its amax only
    r, c = x.shape
    cp = -(-c // BLOCK) * BLOCK
    xf = x.float() if cp == c else F.pad(x.float(), (0, cp - c))  # no pad pass when whole
    xb = xf.reshape(r, cp // BLOCK, BLOCK)
    amax = xb.abs().amax(-1, keepdim=True)
    s = torch.where(amax > 0, amax * INV_FMAX[dtype], torch.ones_like(amax))
    q = (xb / s).clamp(-FMAX[dtype], FMAX[dtype]).to(dtype).view(r, cp)[:, :c]
    return q.contiguous(), s.view(r, cp // BLOCK)


def _tiles_q(w: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    r, c = w.shape
    rp, cp = -(-r // BLOCK) * BLOCK, -(-c // BLOCK) * BLOCK
    wb = F.pad(w.float(), (0, cp - c, 0, rp - r)).view(rp // BLOCK, BLOCK, cp // BLOCK, BLOCK)
    amax = wb.abs().amax(dim=(1, 3), keepdim=True)
    s = torch.where(amax > 0, amax * INV_FMAX[dtype], torch.ones_like(amax))
    q = (wb / s).clamp(-FMAX[dtype], FMAX[dtype]).to(dtype).view(rp, cp)[:r, :c]
    return q.contiguous(), s.view(rp // BLOCK, cp // BLOCK)


def _tensor_q_both(x: torch.Tensor, dtype: torch.dtype):
    # the operand and its transpose from one read (wgrad needs x^T / g^T)
    q, s = _tensor_q(x, dtype)
    return q, q.t().contiguous(), s


_QUANT = {"tensor": _tensor_q, "1x128": _rows_q, "128x128": _tiles_q}


def _compile_on() -> bool:
    return env_flag("PACKTOOL_FUSED", True)  # `false` is off, as everywhere (env.py)


@functools.cache
def _compiled(fn):
    # one fused Triton kernel per quantizer instead of ~6 eager passes; dynamic=True because
    # the token count changes every micro-batch. Each quantizer meets several layouts
    # (x, x^T views, weights, two dtypes): past dynamo's default limit of 8 recompiles it
    # silently ran eager (3.6x the GPU time of blockwise quantization on an H200 profile)
    import torch._dynamo.config as dc
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(dc, name):
            setattr(dc, name, max(getattr(dc, name), 64))
    return torch.compile(fn, dynamic=True)


def _run(fn, x, *args):
    if x.is_cuda and _compile_on():
        fn = _compiled(fn)
    return fn(x, *args)


def _range(name: str):
    # a profiler range (bench/train_fp8.py --profile splits GPU time by it); near free otherwise
    return torch.profiler.record_function(name)


def quantize(x: torch.Tensor, kind: str, dtype: torch.dtype = E4M3) -> Q:
    """Quantize a 2-D tensor along its last dim per `kind`."""
    with _range("fp8_quant"):
        q, s = _run(_QUANT[kind], x, dtype)
    return Q(q, s, kind)


# The CUDA quantizers of activations and gradients: 'triton' (packtool/kernels/fp8_quant.py, one read
# of x writes the operand and its transpose, bit-exact with the reference) or 'compiled' (the
# torch.compile'd reference quantizers, kept so bench/ can compare the two)
QUANT = env_choice(*FP8_QUANT)
# compiled path only: 'fused' = one compiled kernel writes the operand and its transpose; 'copy'
# = the compiled quantizer writes the operand, then an eager 1-byte transpose copy
TRANSPOSE = env_choice(*FP8_TRANSPOSE)


def _triton_on(x: torch.Tensor) -> bool:
    return x.is_cuda and QUANT == "triton"


def quantize_with_t(x: torch.Tensor, dtype: torch.dtype) -> tuple[Q, Q]:
    """Tensorwise: the operand and its transpose, sharing one scale."""
    with _range("fp8_quant"):
        if _triton_on(x):
            from packtool.kernels.fp8_quant import tensor_q_both_triton
            q, qt, s = tensor_q_both_triton(x, dtype)
        elif TRANSPOSE == "fused":
            q, qt, s = _run(_tensor_q_both, x, dtype)
        else:
            q, s = _run(_tensor_q, x, dtype)
            qt = q.t().contiguous()
    return Q(q, s, "tensor"), Q(qt, s, "tensor")


def quantize_rows_with_t(x: torch.Tensor, dtype: torch.dtype) -> tuple[Q, Q]:
    """Blockwise: x [T, K] in 1x128 blocks along K, and x^T [K, T] in 1x128 blocks along T
    (fprop/dgrad's operand and wgrad's)."""
    if not _triton_on(x):
        return quantize(x, "1x128", dtype), quantize(x.t(), "1x128", dtype)
    from packtool.kernels.fp8_quant import rows_q_both_triton
    with _range("fp8_quant"):
        q, s, qt, st = rows_q_both_triton(x, dtype)
    return Q(q, s, "1x128"), Q(qt, st, "1x128")


def dequantize(a: Q) -> torch.Tensor:
    r, c = a.data.shape
    x = a.data.float()
    if a.kind == "tensor":
        return x * a.scale
    if a.kind == "1x128":
        return x * a.scale.repeat_interleave(BLOCK, 1)[:, :c]
    return x * a.scale.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:r, :c]


def _scale_a(a: Q) -> torch.Tensor:
    # torch's 1x128 check wants the scale outer-dim-major (stride (1, rows))
    return a.scale.t().contiguous().t() if a.kind == "1x128" else a.scale


def _scale_b(b: Q) -> torch.Tensor:
    # torch checks mat2 = B^T through scale_b^T against B's own [rows, blocks] layout
    if b.kind == "1x128":
        return b.scale.t().contiguous()
    return b.scale.t() if b.kind == "128x128" else b.scale


def mm(a: Q, b: Q, out_dtype: torch.dtype = torch.bfloat16, impl: str = "scaled_mm",
       fast_accum: bool = False) -> torch.Tensor:
    """A @ B^T from quantized operands (both [*, R], quantized along R)."""
    if impl == "reference":
        return (dequantize(a) @ dequantize(b).t()).to(out_dtype)
    if impl != "scaled_mm":
        raise PacktoolInputError(f"impl must be 'scaled_mm' or 'reference', got {impl!r}")
    with _range("fp8_gemm"):
        return torch._scaled_mm(a.data, b.data.t(), scale_a=_scale_a(a), scale_b=_scale_b(b),
                                out_dtype=out_dtype, use_fast_accum=fast_accum)


# --- the three GEMMs of a linear layer -------------------------------------------------

def weight_operands(w: torch.Tensor, recipe: str) -> tuple[Q, Q]:
    """The weight as fprop's B (W, [N, K]) and dgrad's B (W^T, [K, N]). A weight changes only
    at the optimizer step, so callers may keep these across micro-batches."""
    if recipe not in RECIPES:
        raise PacktoolInputError(f"FP8 recipe must be one of {RECIPES}, got {recipe!r}")
    if recipe == "tensorwise":
        return quantize_with_t(w, E4M3)
    if _triton_on(w):
        from packtool.kernels.fp8_quant import tiles_q_both_triton
        with _range("fp8_quant"):
            q, s, qt, st = tiles_q_both_triton(w, E4M3)
        return Q(q, s, "128x128"), Q(qt, st, "128x128")
    wq = quantize(w, "128x128", E4M3)
    return wq, wq.t()


def fprop(x: torch.Tensor, w: torch.Tensor, recipe: str, impl: str = "scaled_mm",
          w_ops: tuple[Q, Q] | None = None):
    """y = x W^T. Returns y and what backward needs (x's wgrad operand, W^T)."""
    wq, wq_t = weight_operands(w, recipe) if w_ops is None else w_ops
    if recipe == "tensorwise":
        xq, xq_t = quantize_with_t(x, E4M3)
        # fprop keeps cuBLAS's fast accumulation (as TransformerEngine does); grads do not
        return mm(xq, wq, x.dtype, impl, fast_accum=True), (xq_t, wq_t)
    xq, xq_t = quantize_rows_with_t(x, E4M3)
    return mm(xq, wq, x.dtype, impl), (xq_t, wq_t)


def backward(g: torch.Tensor, saved, recipe: str, impl: str = "scaled_mm"):
    """dx = g W and dW = g^T x from fprop's saved operands."""
    x_t, wq_t = saved
    if recipe == "tensorwise":
        gq, gq_t = quantize_with_t(g, E5M2)
    else:
        gq, gq_t = quantize_rows_with_t(g, E4M3)
    dx = mm(gq, wq_t, g.dtype, impl)
    dw = mm(gq_t, x_t, g.dtype, impl)
    return dx, dw
