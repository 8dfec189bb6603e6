"""Which local token counts T does each FP8 recipe's GEMMs accept? Run the kernels and see.

For every recipe (tensorwise, blockwise) and each GEMM of a linear layer (fprop: T is M;
dgrad: T is M; wgrad: T is the reduction dim), run torch._scaled_mm (cuBLASLt) on T tokens
and compare with packtool.kernels.fp8's fp32 reference on the same quantized operands:
  ok        accepted, within 2e-2 relative L2 of the reference
  WRONG     accepted, but the result disagrees (a silent failure)
  rejected  raised (first line of the error)
The SP-gathered case runs the same GEMMs on the gathered T = tp x shard, so it is the same
table read at T = tp x shard. Also records rowwise scaling and mxfp8 (1x32, e8m0) on this GPU.

    PACKTOOL_FUSED=0 python bench/fp8_tiles.py --out OUT/fp8_tiles.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("PACKTOOL_FUSED", "0")  # eager quantizers: ragged shapes, no compiles

from packtool.kernels import fp8

T_SWEEP = (1, 4, 8, 12, 15, 16, 17, 20, 24, 32, 48, 64, 96, 112, 120, 128, 136, 144, 192, 200, 256, 320,
           384, 640, 1000, 1024, 2048, 2064, 4096)


def _rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm().clamp(min=1e-30))


def _gemm_operands(recipe, gemm, x, w, g):
    # the operands packtool.kernels.fp8.fprop/backward build, one GEMM at a time
    if recipe == "tensorwise":
        xq = fp8.quantize(x, "tensor", fp8.E4M3)
        wq = fp8.quantize(w, "tensor", fp8.E4M3)
        gq = fp8.quantize(g, "tensor", fp8.E5M2)
        return {"fprop": (xq, wq), "dgrad": (gq, wq.t()),
                "wgrad": (gq.t(), xq.t())}[gemm]
    wq = fp8.quantize(w, "128x128")
    if gemm == "fprop":
        return fp8.quantize(x, "1x128"), wq
    if gemm == "dgrad":
        return fp8.quantize(g, "1x128"), wq.t()
    return fp8.quantize(g.t(), "1x128"), fp8.quantize(x.t(), "1x128")


def probe(recipe, gemm, T, K=512, N=1024):
    x = torch.randn(T, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) * 0.05
    g = torch.randn(T, N, device="cuda", dtype=torch.bfloat16)
    a, b = _gemm_operands(recipe, gemm, x, w, g)
    ref = fp8.mm(a, b, torch.float32, "reference")
    try:
        got = fp8.mm(a, b, torch.bfloat16, "scaled_mm")
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - the message is the result
        return "rejected: " + str(e).strip().splitlines()[0][:160]
    err = _rel(got, ref)
    return "ok" if err < 2e-2 else f"WRONG rel={err:.3g}"


def extra_checks() -> dict:
    out = {}
    # blockwise weights: the 128x128 scale grid's row stride is ceil(dim/128) floats; does
    # cuBLASLt get it right when that is not a multiple of 4 (16 bytes)?
    for K in (256, 384, 512, 640, 1024, 1536):
        out[f"blockwise_fprop_K{K}_N1024"] = probe("blockwise", "fprop", 256, K=K, N=1024)
        out[f"blockwise_dgrad_K1024_N{K}"] = probe("blockwise", "dgrad", 256, K=1024, N=K)
    a = torch.randn(64, 128, device="cuda").to(fp8.E4M3)
    b = torch.randn(256, 128, device="cuda").to(fp8.E4M3)
    try:
        torch._scaled_mm(a, b.t(), scale_a=torch.ones(64, 1, device="cuda"),
                         scale_b=torch.ones(1, 256, device="cuda"), out_dtype=torch.bfloat16)
        torch.cuda.synchronize()
        out["rowwise"] = "ok"
    except Exception as e:  # noqa: BLE001
        out["rowwise"] = "rejected: " + str(e).splitlines()[0][:160]
    try:
        e8 = torch.float8_e8m0fnu
        sa = torch.ones(128 * 4, device="cuda").to(e8)
        sb = torch.ones(256 * 4, device="cuda").to(e8)
        torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
        torch.cuda.synchronize()
        out["mxfp8_1x32"] = "ok"
    except Exception as e:  # noqa: BLE001
        out["mxfp8_1x32"] = "rejected: " + str(e).strip().splitlines()[0][:200]
    return out


def rule(table: dict) -> dict:
    """Smallest r such that every swept T accepted-and-correct in all three GEMMs is exactly
    the multiples of r (None if the accepted set is not of that form)."""
    def multiple(good):
        for cand in (1, 2, 4, 8, 16, 32, 64, 128, 256):
            if good == [T for T in T_SWEEP if T % cand == 0]:
                return cand
        return None

    res = {}
    for recipe, gemms in table.items():
        good = [T for T in T_SWEEP if all(gemms[gm][str(T)] == "ok" for gm in gemms)]
        res[recipe] = {"accepted_T": good, "multiple": multiple(good),
                       "per_gemm_multiple": {gm: multiple([T for T in T_SWEEP
                                                           if row[str(T)] == "ok"])
                                             for gm, row in gemms.items()}}
    return res


def _ms(fn, reps=20):
    for _ in range(3):
        fn()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    e0.record()
    for _ in range(reps):
        fn()
    e1.record()
    torch.cuda.synchronize()
    return e0.elapsed_time(e1) / reps


def speed(T=32768, shapes=((2048, 6144), (2048, 11264), (5632, 2048), (4096, 12288),
                           (4096, 22016), (11008, 4096))) -> list:
    """fprop GEMM time bf16 vs FP8 (compiled quantizers), and the quantization alone. The
    Triton quantizers' figures are bench/fp8_quant.py's."""
    os.environ["PACKTOOL_FUSED"] = "1"
    fp8.QUANT = "compiled"  # what this table has always timed (TRANSPOSE applies to it only)
    rows = []
    for K, N in shapes:
        x = torch.randn(T, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) * 0.02
        r = {"T": T, "K": K, "N": N, "bf16_ms": _ms(lambda: x @ w.t())}
        for rc in fp8.RECIPES:
            r[f"{rc}_fprop_ms"] = _ms(lambda: fp8.fprop(x, w, rc))
            if rc == "tensorwise":
                a, b = fp8.quantize(x, "tensor"), fp8.quantize(w, "tensor")
                r[f"{rc}_gemm_ms"] = _ms(lambda: fp8.mm(a, b, fast_accum=True))
                r[f"{rc}_quant_x_ms"] = _ms(lambda: fp8.quantize_with_t(x, fp8.E4M3))
                fp8.TRANSPOSE = "copy"
                r[f"{rc}_quant_x_copyT_ms"] = _ms(lambda: fp8.quantize_with_t(x, fp8.E4M3))
                fp8.TRANSPOSE = "fused"
                r[f"{rc}_quant_x_noT_ms"] = _ms(lambda: fp8.quantize(x, "tensor"))
            else:
                a, b = fp8.quantize(x, "1x128"), fp8.quantize(w, "128x128")
                r[f"{rc}_gemm_ms"] = _ms(lambda: fp8.mm(a, b))
                r[f"{rc}_quant_x_ms"] = _ms(lambda: fp8.quantize(x, "1x128"))
                r[f"{rc}_quant_xT_ms"] = _ms(lambda: fp8.quantize(x.t(), "1x128"))
                r[f"{rc}_quant_w_ms"] = _ms(lambda: fp8.quantize(w, "128x128"))
        r["tflops_bf16"] = 2 * T * K * N / r["bf16_ms"] / 1e9
        for rc in fp8.RECIPES:
            r[f"tflops_{rc}_gemm"] = 2 * T * K * N / r[f"{rc}_gemm_ms"] / 1e9
        rows.append(r)
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}),
              flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--speed", action="store_true", help="also time fprop GEMMs at model shapes")
    a = ap.parse_args()
    torch.manual_seed(0)
    table = {rc: {gm: {str(T): probe(rc, gm, T) for T in T_SWEEP}
                  for gm in ("fprop", "dgrad", "wgrad")} for rc in fp8.RECIPES}
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "cublaslt": torch._C._cuda_getCompiledVersion() if hasattr(torch._C, "_cuda_getCompiledVersion") else None,
           "table": table, "rule": rule(table), "extra": extra_checks()}
    if a.speed:
        res["speed"] = speed()
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    for rc, gms in table.items():
        for gm, row in gms.items():
            print(rc, gm, " ".join(f"{T}:{'ok' if v == 'ok' else ('W' if v.startswith('W') else 'x')}"
                                   for T, v in row.items()))
    print(json.dumps(res["rule"]), json.dumps(res["extra"]), flush=True)
    for rc, gms in table.items():  # one example message per distinct rejection
        seen = set()
        for gm, row in gms.items():
            for T, v in row.items():
                if v != "ok" and (gm, v[:60]) not in seen:
                    seen.add((gm, v[:60]))
                    print(f"  {rc} {gm} T={T}: {v}")


if __name__ == "__main__":
    main()
