"""Triton FP8 quantizers: each reads its bf16 input once and writes both GEMM operands.

Every linear needs an activation (and, in backward, a gradient) quantized twice: along K for
fprop/dgrad ([T, K]) and along T for wgrad ([K, T], the transpose). The torch reference
(`packtool.kernels.fp8._tensor_q` / `_rows_q`, compiled by Inductor) does that in separate passes
over x; these kernels do it in one:

  tensorwise  `amax_triton` (a reduction: per-program max |x|, combined by an atomic max on
              the float's bits, which orders like the float because |x| >= 0), then
              `tensor_q_both_triton`: one read of x, scale = FMAX / amax exactly as the
              reference (IEEE division), the fp8 tile written as is and transposed.
  blockwise   `rows_q_both_triton`: one read of a 128x128 tile gives the 1x128-along-K
              quantization of x (128 row scales) and the 1x128-along-T quantization of x^T
              (128 column scales); ragged edge tiles are zero-padded for the amax only, as
              the reference pads. `tiles_q_both_triton`: a weight in 128x128 blocks and its
              transpose, from one read.

Bit-exact with the eager reference: the IEEE quotient where the reference divides (`_div`),
fp32 max reductions (order-free), round-to-nearest-even fp8 casts after the same clamp.
Scales are written block-major ([blocks, rows] in memory, returned as the [rows, blocks]
view), which is the layout `packtool.kernels.fp8._scale_a/_scale_b` hand cuBLASLt, so no copy follows.

Kernels are built at first launch (packtool/kernels/_triton.py says why): interpreted on CPU tensors
under TRITON_INTERPRET=1 (tests), compiled and autotuned on a GPU.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from packtool.kernels._triton import interpreting
from packtool.kernels.fp8_format import BLOCK, FMAX, INV_FMAX
from packtool.errors import PacktoolConfigError, PacktoolInputError


def _amax_kernel(x_ptr, out_ptr, n, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
    m = tl.max(tl.abs(x), axis=0)
    # non-negative floats order like their int32 bits, so an integer atomic max is a float max
    tl.atomic_max(out_ptr, m.to(tl.int32, bitcast=True))


def _tensor_q_both_kernel(x_ptr, amax_ptr, q_ptr, qt_ptr, inv_ptr, T, K, fmax,
                          BT: tl.constexpr, BK: tl.constexpr, EXACT: tl.constexpr):
    pt, pk = tl.program_id(0), tl.program_id(1)
    rows = (pt * BT + tl.arange(0, BT)).to(tl.int64)
    cols = (pk * BK + tl.arange(0, BK)).to(tl.int64)
    mask = (rows[:, None] < T) & (cols[None, :] < K)
    amax = tl.load(amax_ptr)
    # the reference: scale = (1 / amax) * FMAX (1 where amax = 0), data = clamp(x * scale)
    scale = tl.where(amax > 0, tl.math.div_rn(tl.zeros_like(amax) + 1.0, amax) * fmax, 1.0)
    x = tl.load(x_ptr + rows[:, None] * K + cols[None, :], mask=mask, other=0.0)
    y = _to_fp8(tl.clamp(x.to(tl.float32) * scale, -fmax, fmax), q_ptr.dtype.element_ty, EXACT)
    tl.store(q_ptr + rows[:, None] * K + cols[None, :], y, mask=mask)
    tl.store(qt_ptr + cols[:, None] * T + rows[None, :], tl.trans(y), mask=tl.trans(mask))
    if (pt == 0) & (pk == 0):
        tl.store(inv_ptr, tl.math.div_rn(tl.zeros_like(scale) + 1.0, scale))


@triton.jit
def _div(x, s, r):
    """x / s correctly rounded, from r = 1/s correctly rounded (one per row or column): the
    product's error is taken back with one exact fma residual (Markstein's theorem: the
    corrected quotient is the IEEE one for normal operands). 3 instructions instead of
    div.rn's ~15, which had made the blockwise kernel compute-bound."""
    s = tl.broadcast_to(s, x.shape)  # tl.fma does not broadcast
    r = tl.broadcast_to(r, x.shape)
    q = x * r
    return tl.fma(tl.fma(-q, s, x), r, q)


@triton.jit
def _scales(amax, inv_fmax):
    # the reference's s = amax * (1/FMAX), 1 where a block is all zeros; and 1/s
    s = tl.where(amax > 0, amax * inv_fmax, 1.0)
    return s, tl.math.div_rn(s * 0.0 + 1.0, s)  # s is finite and > 0


def _rows_q_both_kernel(x_ptr, q_ptr, s_ptr, qt_ptr, st_ptr, T, K, fmax, inv_fmax,
                        B: tl.constexpr, EXACT: tl.constexpr):
    pt, pk = tl.program_id(0), tl.program_id(1)
    rows = (pt * B + tl.arange(0, B)).to(tl.int64)
    cols = (pk * B + tl.arange(0, B)).to(tl.int64)
    mask = (rows[:, None] < T) & (cols[None, :] < K)
    x = tl.load(x_ptr + rows[:, None] * K + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    # along K: one scale per row of the tile (the reference: data = x / s)
    rs, rr = _scales(tl.max(tl.abs(x), axis=1), inv_fmax)
    y = _div(x, rs[:, None], rr[:, None])
    y = _to_fp8(tl.clamp(y, -fmax, fmax), q_ptr.dtype.element_ty, EXACT)
    tl.store(q_ptr + rows[:, None] * K + cols[None, :], y, mask=mask)
    tl.store(s_ptr + pk * T + rows, rs, mask=rows < T)  # [K blocks, T]
    # along T (the transpose's rows): one scale per column of the tile
    cs, cr = _scales(tl.max(tl.abs(x), axis=0), inv_fmax)
    yt = _div(x, cs[None, :], cr[None, :])
    yt = _to_fp8(tl.clamp(yt, -fmax, fmax), qt_ptr.dtype.element_ty, EXACT)
    tl.store(qt_ptr + cols[:, None] * T + rows[None, :], tl.trans(yt), mask=tl.trans(mask))
    tl.store(st_ptr + pt * K + cols, cs, mask=cols < K)  # [T blocks, K]


def _tiles_q_both_kernel(w_ptr, q_ptr, s_ptr, qt_ptr, st_ptr, R, C, fmax, inv_fmax,
                         B: tl.constexpr, EXACT: tl.constexpr):
    # a weight [R, C] in 128x128 blocks, and its transpose: the same fp8 tile written twice
    pr, pc = tl.program_id(0), tl.program_id(1)
    rows = (pr * B + tl.arange(0, B)).to(tl.int64)
    cols = (pc * B + tl.arange(0, B)).to(tl.int64)
    mask = (rows[:, None] < R) & (cols[None, :] < C)
    x = tl.load(w_ptr + rows[:, None] * C + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    s, r = _scales(tl.max(tl.max(tl.abs(x), axis=1), axis=0), inv_fmax)
    y = _to_fp8(tl.clamp(_div(x, s, r), -fmax, fmax), q_ptr.dtype.element_ty, EXACT)
    tl.store(q_ptr + rows[:, None] * C + cols[None, :], y, mask=mask)
    tl.store(qt_ptr + cols[:, None] * R + rows[None, :], tl.trans(y), mask=tl.trans(mask))
    tl.store(s_ptr + pr * tl.num_programs(1) + pc, s)
    tl.store(st_ptr + pc * tl.num_programs(0) + pr, s)


@triton.jit
def _to_fp8(v, dtype: tl.constexpr, EXACT: tl.constexpr):
    """Cast clamped fp32 to fp8, round-to-nearest-even. On a GPU that is the hardware cvt.
    EXACT (the interpreter, whose float cast truncates and drops the exponent carry): round in
    fp32 first, so the cast that follows meets only representable values."""
    if EXACT:
        MB: tl.constexpr = 3 if dtype == tl.float8e4nv else 2  # mantissa bits
        EMIN: tl.constexpr = -6 if dtype == tl.float8e4nv else -14  # smallest normal exponent
        SH: tl.constexpr = 23 - MB
        bits = v.to(tl.int32, bitcast=True)
        sign = bits & -2147483648
        mag = bits & 2147483647
        # normal range: RNE on the fp32 bits (a carry out of the mantissa bumps the exponent)
        rn = (mag + ((1 << (SH - 1)) - 1) + ((mag >> SH) & 1)) & ~((1 << SH) - 1)
        a = mag.to(tl.float32, bitcast=True)
        # subnormal range: a fixed quantum 2^(EMIN-MB); adding 1.5 * 2^23 quanta rounds to it
        big: tl.constexpr = 1.5 * 2.0 ** (23 + EMIN - MB)
        sub = ((a + big) - big).to(tl.int32, bitcast=True)
        mag = tl.where(a < 2.0 ** EMIN, sub, rn)
        v = (mag | sign).to(tl.float32, bitcast=True)
    return v.to(dtype)


_AMAX_BLOCK = 8192
_built: dict = {}


def _tile_configs(shapes):
    return [triton.Config(dict(zip(("BT", "BK"), s)), num_warps=w) for s in shapes for w in (4, 8)]


def _kernel(name: str):
    """The jitted kernel for the current mode; on a GPU the cast kernels are autotuned on K."""
    key = (name, interpreting())
    if key not in _built:
        fn = {"amax": _amax_kernel, "tensor": _tensor_q_both_kernel,
              "rows": _rows_q_both_kernel, "tiles": _tiles_q_both_kernel}[name]
        k = triton.jit(fn)
        if not key[1] and name == "tensor":
            k = triton.autotune(_tile_configs(((64, 64), (64, 128), (128, 64), (128, 128))),
                                key=["K"])(k)
        elif not key[1] and name in ("rows", "tiles"):
            k = triton.autotune([triton.Config({}, num_warps=w) for w in (4, 8, 16)],
                                key=["K" if name == "rows" else "C"])(k)
        _built[key] = k
    return _built[key]


def _check(x: torch.Tensor) -> torch.Tensor:
    if x.dim() != 2:
        raise PacktoolInputError(f"fp8 quantize: a 2-D tensor is needed, got shape {tuple(x.shape)}")
    if x.device.type != "cuda" and not interpreting():
        raise PacktoolConfigError(f"fp8 Triton quantizer: tensor on {x.device} needs a CUDA device, or "
                           "TRITON_INTERPRET=1 for the CPU interpreter; use packtool.kernels.fp8's "
                           "torch quantizers on CPU")
    return x.contiguous()


def amax_triton(x: torch.Tensor) -> torch.Tensor:
    """max |x| as a 0-dim fp32 tensor (0 for an empty x)."""
    x = _check(x)
    out = torch.zeros((), dtype=torch.int32, device=x.device)
    n = x.numel()
    if n:
        _kernel("amax")[(triton.cdiv(n, _AMAX_BLOCK),)](x, out, n, BLOCK_N=_AMAX_BLOCK)
    return out.view(torch.float32)


def tensor_q_both_triton(x: torch.Tensor, dtype: torch.dtype):
    """(data [T, K], data^T [K, T], dequantization scale 0-dim): `_tensor_q(x)` and its
    transpose, bit for bit."""
    x = _check(x)
    T, K = x.shape
    amax = amax_triton(x)
    q = torch.empty((T, K), dtype=dtype, device=x.device)
    qt = torch.empty((K, T), dtype=dtype, device=x.device)
    inv = torch.empty((), dtype=torch.float32, device=x.device)
    if T * K == 0:
        return q, qt, inv.fill_(1.0)
    kern = _kernel("tensor")
    if interpreting():
        kern[(triton.cdiv(T, 64), triton.cdiv(K, 64))](x, amax, q, qt, inv, T, K, FMAX[dtype],
                                                       BT=64, BK=64, EXACT=True)
    else:
        grid = lambda m: (triton.cdiv(T, m["BT"]), triton.cdiv(K, m["BK"]))  # noqa: E731
        kern[grid](x, amax, q, qt, inv, T, K, FMAX[dtype], EXACT=False)
    return q, qt, inv


def rows_q_both_triton(x: torch.Tensor, dtype: torch.dtype):
    """(data [T, K], scales [T, ceil(K/128)], data^T [K, T], scales^T [K, ceil(T/128)]):
    `_rows_q(x)` and `_rows_q(x.t())`, bit for bit; scales are views of block-major storage."""
    x = _check(x)
    T, K = x.shape
    nk, nt = triton.cdiv(K, BLOCK), triton.cdiv(T, BLOCK)
    q = torch.empty((T, K), dtype=dtype, device=x.device)
    qt = torch.empty((K, T), dtype=dtype, device=x.device)
    s = torch.empty((nk, T), dtype=torch.float32, device=x.device)
    st = torch.empty((nt, K), dtype=torch.float32, device=x.device)
    if T and K:
        _kernel("rows")[(nt, nk)](x, q, s, qt, st, T, K, FMAX[dtype], INV_FMAX[dtype],
                                  B=BLOCK,
                                  EXACT=interpreting())
    return q, s.t(), qt, st.t()


def tiles_q_both_triton(w: torch.Tensor, dtype: torch.dtype):
    """(data [R, C], scales [ceil(R/128), ceil(C/128)], data^T [C, R], scales^T): `_tiles_q(w)`
    and its transpose (`Q.t()`), bit for bit, from one read of w."""
    w = _check(w)
    R, C = w.shape
    nr, nc = triton.cdiv(R, BLOCK), triton.cdiv(C, BLOCK)
    q = torch.empty((R, C), dtype=dtype, device=w.device)
    qt = torch.empty((C, R), dtype=dtype, device=w.device)
    s = torch.empty((nr, nc), dtype=torch.float32, device=w.device)
    st = torch.empty((nc, nr), dtype=torch.float32, device=w.device)
    if R and C:
        _kernel("tiles")[(nr, nc)](w, q, s, qt, st, R, C, FMAX[dtype], INV_FMAX[dtype],
                                   B=BLOCK, EXACT=interpreting())
    return q, s, qt, st
