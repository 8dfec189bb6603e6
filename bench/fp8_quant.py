"""The Triton FP8 quantizers (packtool/kernels/fp8_quant.py) on a GPU: bit-exactness against the eager
torch reference at model shapes, bandwidth against the torch.compile'd quantizers, and what a
whole FP8 linear (fprop + dgrad + wgrad, quantization included) costs against bf16.

  check   Triton vs eager reference (packtool.kernels.fp8._tensor_q / _rows_q / _tiles_q, not compiled)
          on random bf16 with per-row/per-column magnitude spread, T ragged and whole:
          mismatching fp8 bytes and scales (0 expected); the compiled quantizers against the
          same reference (information only: Inductor's division is not IEEE)
  speed   median time (triton.testing.do_bench) of each quantizer producing the operand and
          its transpose; GB/s counts the fewest bytes: x read once, both fp8 outputs written
          (tensorwise's amax pass re-reads x, which is counted separately as 'moved')
  linear  one linear's three GEMMs with quantization, per quantizer kind, vs bf16 GEMMs
          (weights quantized beforehand, once per optimizer step as in training)

    python bench/fp8_quant.py --out OUT/fp8_quant.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from packtool.kernels import fp8  # noqa: E402
from packtool.kernels import fp8_quant as fq  # noqa: E402

SHAPES = ((32768, 2048), (32768, 4096), (32768, 5632), (32768, 11264), (16400, 4096),
          (2064, 2048 + 16 * 9))


def _x(T, K, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(T, K, device="cuda", generator=g)
    x *= torch.exp2(torch.randint(-6, 6, (T, 1), device="cuda", generator=g).float())
    x *= torch.exp2(torch.randint(-3, 3, (1, K), device="cuda", generator=g).float())
    return x.bfloat16()


def _diff(a, b):
    return int((a.view(torch.uint8) != b.view(torch.uint8)).sum())


def check() -> list:
    rows = []
    ctq, crq = fp8._compiled(fp8._tensor_q), fp8._compiled(fp8._rows_q)
    ctiles = fp8._compiled(fp8._tiles_q)
    for i, (T, K) in enumerate(SHAPES):
        x = _x(T, K, i)
        for dt in (fp8.E4M3, fp8.E5M2):
            q, qt, s = fq.tensor_q_both_triton(x, dt)
            rq, rs = fp8._tensor_q(x, dt)
            cq, cs = ctq(x, dt)
            rows.append({"recipe": "tensorwise", "T": T, "K": K, "dtype": str(dt),
                         "triton_bytes_off": _diff(q, rq) + _diff(qt, rq.t().contiguous()),
                         "triton_scale_equal": bool(torch.equal(s, rs)),
                         "compiled_bytes_off": _diff(cq, rq),
                         "compiled_scale_equal": bool(torch.equal(cs, rs))})
        dt = fp8.E4M3
        q, s, qt, st = fq.rows_q_both_triton(x, dt)
        rq, rs = fp8._rows_q(x, dt)
        rqt, rst = fp8._rows_q(x.t(), dt)
        cq, cs = crq(x, dt)
        rows.append({"recipe": "blockwise", "T": T, "K": K, "dtype": str(dt),
                     "triton_bytes_off": _diff(q, rq) + _diff(qt, rqt),
                     "triton_scale_equal": bool(torch.equal(s, rs) and torch.equal(st, rst)),
                     "compiled_bytes_off": _diff(cq, rq),
                     "compiled_scale_equal": bool(torch.equal(cs, rs))})
        print(json.dumps(rows[-3:]), flush=True)
    for i, (R, C) in enumerate(((11264, 4096), (4096, 11264), (12288, 4096), (2064, 2192))):
        w = _x(R, C, 50 + i)
        q, s, qt, st = fq.tiles_q_both_triton(w, fp8.E4M3)
        rq, rs = fp8._tiles_q(w, fp8.E4M3)  # the eager reference, as for the activations
        cq, cs = ctiles(w, fp8.E4M3)
        rows.append({"recipe": "blockwise weight 128x128", "T": R, "K": C, "dtype": "e4m3",
                     "triton_bytes_off": _diff(q, rq) + _diff(qt, rq.t().contiguous()),
                     "triton_scale_equal": bool(torch.equal(s, rs) and torch.equal(st, rs.t())),
                     "compiled_bytes_off": _diff(cq, rq),
                     "compiled_scale_equal": bool(torch.equal(cs, rs))})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def _ms(fn):
    return do_bench(fn, warmup=25, rep=100, return_mode="median")


def speed(compiled: bool = True) -> list:
    rows = []
    ctb, crq = fp8._compiled(fp8._tensor_q_both), fp8._compiled(fp8._rows_q)
    for i, (T, K) in enumerate(SHAPES[:4]):
        x = _x(T, K, 100 + i)
        n = T * K
        least = 2 * n + 2 * n  # bf16 read once, two fp8 outputs
        r = {"T": T, "K": K,
             "tw_triton_ms": _ms(lambda: fq.tensor_q_both_triton(x, fp8.E4M3)),
             "tw_compiled_ms": _ms(lambda: ctb(x, fp8.E4M3)) if compiled else None,
             "tw_amax_only_ms": _ms(lambda: fq.amax_triton(x)),
             "bw_triton_ms": _ms(lambda: fq.rows_q_both_triton(x, fp8.E4M3)),
             "bw_compiled_ms": (_ms(lambda: (crq(x, fp8.E4M3), crq(x.t(), fp8.E4M3)))
                                if compiled else None),
             "copy_ms": _ms(lambda: x.clone())}
        w = torch.randn(K, T // 8, device="cuda").bfloat16()  # a weight-sized 128x128 input
        r["w_tiles_triton_ms"] = _ms(lambda: fq.tiles_q_both_triton(w, fp8.E4M3))
        r["w_tiles_triton_GBps_least_bytes"] = 4 * w.numel() / r["w_tiles_triton_ms"] / 1e6
        for k in ("tw_triton", "tw_compiled", "bw_triton", "bw_compiled"):
            if r[k + "_ms"] is not None:
                r[k + "_GBps_least_bytes"] = least / r[k + "_ms"] / 1e6
        r["tw_triton_GBps_moved"] = (least + 2 * n) / r["tw_triton_ms"] / 1e6  # + amax read
        r["copy_GBps"] = 4 * n / r["copy_ms"] / 1e6
        rows.append(r)
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}),
              flush=True)
    return rows


def linear(T=32768, shapes=((2048, 6144), (2048, 11264), (5632, 2048), (4096, 12288),
                            (4096, 22016), (11008, 4096), (4096, 4096))) -> list:
    rows = []
    for K, N in shapes:
        x = torch.randn(T, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) * 0.02
        g = torch.randn(T, N, device="cuda", dtype=torch.bfloat16)
        r = {"T": T, "K": K, "N": N,
             "bf16_ms": _ms(lambda: (x @ w.t(), g @ w, g.t() @ x))}
        for rc in fp8.RECIPES:
            w_ops = fp8.weight_operands(w, rc)
            for mode in ("compiled", "triton"):
                fp8.QUANT = mode

                def step():
                    _, saved = fp8.fprop(x, w, rc, w_ops=w_ops)
                    fp8.backward(g, saved, rc)
                r[f"{rc}_{mode}_ms"] = _ms(step)
            fp8.QUANT = "triton"
            r[f"{rc}_speedup_triton"] = r["bf16_ms"] / r[f"{rc}_triton_ms"]
            r[f"{rc}_speedup_compiled"] = r["bf16_ms"] / r[f"{rc}_compiled_ms"]
        rows.append(r)
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}),
              flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--parts", default="check,speed,linear")
    ap.add_argument("--no-compiled", action="store_true", help="speed: Triton quantizers only")
    a = ap.parse_args()
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load": os.getloadavg()}
    for part in a.parts.split(","):
        res[part] = {"check": check, "speed": lambda: speed(not a.no_compiled),
                     "linear": linear}[part]()
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    if "check" in res:
        bad = [r for r in res["check"] if r["triton_bytes_off"] or not r["triton_scale_equal"]]
        print(f"check: {len(res['check']) - len(bad)}/{len(res['check'])} bit-exact", flush=True)


if __name__ == "__main__":
    main()
