"""Where the time of two support_logprob goals goes (packtool/kernels/support_kernels.py,
packtool/kernels/support_logprob.py), on a GPU; N 16k, H 4096, V 151,936, bf16, supports as
bench/support_logprob.py makes them. Interleaved rounds, median and min-max of per-round medians.

  det  the deterministic dW against the atomic one: the pair sort alone (`sorted_pairs`), the whole
       deterministic dW (packtool/kernels/support_det.py) in each light-launch variant, the atomic dW;
       fwd+bwd of impl='gather' with either mode; bitwise equality of two deterministic runs and
       their relative L2 to the atomic dW
  fwd  forward alone at large K (spread candidates), piece by piece: the support checks, the row
       sort inside them, the dense path's logits and statistics (torch, and the fused Triton
       buffer statistics), the union probe by named-row marks, impl='dense' / 'auto' whole,
       the full-vocab fused log-prob

    python bench/support_det_profile.py --parts det,fwd --out OUT/det_profile.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.support_logprob import inputs, make_support, methods  # noqa: E402
from packtool.kernels import support_det as SD  # noqa: E402
from packtool.kernels import support_kernels as SK  # noqa: E402
from packtool.kernels import support_autograd as SA, support_path as SP, support_torch  # noqa: E402
from packtool.kernels.support_check import check_support  # noqa: E402

N, HDIM, V = 16384, 4096, 151936


def _ms(fn, reps):
    fn()
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        out.append(s.elapsed_time(e))
    return sorted(out)[len(out) // 2]


def _rounds(parts, rounds, reps, head):
    res = {m: [] for m in parts}
    for _ in range(rounds):
        for m, fn in parts.items():
            res[m].append(_ms(fn, reps))
    rows = []
    for m, t in res.items():
        t = sorted(t)
        r = dict(head, part=m, ms=t[len(t) // 2], min_max=[t[0], t[-1]])
        rows.append(r)
        print(json.dumps(r), flush=True)
    return rows


# (32, 128, 4, 32) crashed triton 3.6's TritonGPURemoveLayoutConversions pass on the H200
VARIANTS = {  # light launch (BLOCK_S, LIGHT_BLOCK_H, LIGHT_WARPS, LIGHT_MAX)
    "s16_h256_w4_m32": (16, 256, 4, 32), "s8_h256_w4_m32": (8, 256, 4, 32),
    "s16_h512_w4_m32": (16, 512, 4, 32), "s4_h512_w4_m32": (4, 512, 4, 32),
    "s16_h256_w4_m8": (16, 256, 4, 8), "s16_h256_w2_m32": (16, 256, 2, 32),
    # wider H blocks: each program recomputes its pairs' g once for more of H
    "s4_h1024_w4_m32": (4, 1024, 4, 32), "s4_h1024_w8_m32": (4, 1024, 8, 32),
    "s4_h2048_w8_m32": (4, 2048, 8, 32), "s8_h1024_w8_m32": (8, 1024, 8, 32),
}
NAMES = ("BLOCK_S", "LIGHT_BLOCK_H", "LIGHT_WARPS", "LIGHT_MAX")


def _det_with(values, fn):
    def run():
        old = [getattr(SD, n) for n in NAMES]
        for n, x in zip(NAMES, values):
            setattr(SD, n, x)
        try:
            return fn()
        finally:
            for n, x in zip(NAMES, old):
                setattr(SD, n, x)
    return run


def det(ks, variants, rounds, reps):
    rows = []
    for k in ks:
        g = torch.Generator(device="cuda").manual_seed(k)
        h = torch.randn(N, HDIM, generator=g, device="cuda").bfloat16()
        _, sup = make_support(N, V, k, g)
        local = (sup.contiguous(), 0, V)  # cands: (ids, start, v_local)
        # what the dW kernels recompute g from (support_kernels.grad_stats): logits, row stats
        z = torch.randn(N, k, generator=g, device="cuda").masked_fill(sup < 0, float("-inf"))
        lse = torch.logsumexp(z, 1).nan_to_num(neginf=0.0)
        ab = torch.randn(2, N, generator=g, device="cuda")
        grad = SK.grad_stats(z, lse, torch.zeros_like(lse), ab[0], ab[1],
                             torch.zeros(N, dtype=torch.long, device="cuda"), 1.0)
        dw = torch.zeros(V, HDIM, device="cuda")
        runs = []
        for _ in range(2):
            d = torch.zeros(V, HDIM, device="cuda")
            SD.grad_weight_sorted_(d, grad, h, local)
            runs.append(d)
        d = torch.zeros(V, HDIM, device="cuda")
        SK.grad_weight_triton_(d, grad, h, local, False, True)
        check = {"K": k, "bitwise_equal_runs": bool(torch.equal(runs[0], runs[1])),
                 "rel_l2_vs_atomic": ((runs[0] - d).norm() / d.norm()).item()}
        print(json.dumps(check), flush=True)
        rows.append(check)
        del runs, d
        parts = {"sort_only": lambda: SD.sorted_pairs(local, V)}
        for name in variants:
            parts["det_" + name] = _det_with(VARIANTS[name], lambda: SD.grad_weight_sorted_(dw, grad, h, local))
        parts["atomic"] = lambda: SK.grad_weight_triton_(dw, grad, h, local, False, True)
        rows += _rounds(parts, rounds, reps, {"K": k, "what": "dW alone"})
        del h, dw, grad, z
        hh, w, samp, sup2, up = inputs(N, HDIM, V, k)
        fns = methods(hh, w, samp, sup2, up, ["gather", "gather_det"])

        def step(fn):
            def run():
                hh.grad = w.grad = None
                fn(True)
            return run
        rows += _rounds({m: step(f) for m, f in fns.items()}, rounds, reps, {"K": k, "what": "fwd+bwd"})
        del hh, w, fns
        torch.cuda.empty_cache()
    return rows


def fwd(ks, rounds, reps):
    rows = []
    for k in ks:
        h, w, samp, sup, up = inputs(N, HDIM, V, k)
        fns = methods(h, w, samp, sup, up, ["dense", "auto", "full_fused"])
        rows_ = check_support(samp, sup, V, 0, V)
        hd = h.detach()
        z = support_torch.logits_dense(hd, w.detach(), rows_.cands, 1 / 0.9)
        parts = {
            "check_support": lambda: check_support(samp, sup, V, 0, V),
            "row_sort_only": lambda: sup.sort(dim=1),
            "logits_dense": lambda: support_torch.logits_dense(hd, w.detach(), rows_.cands, 1 / 0.9),
            "stats_merge": lambda: SA._merge(*SA._stats(z, rows_.pos), None),
        }
        parts["dense_logits_stats"] = lambda: SK.dense_logits_stats(
            hd, w.detach(), rows_.cands, rows_.pos, 1 / 0.9, False)
        parts["named_union"] = lambda: SP.union_of(rows_.cands, True)
        for m, f in fns.items():
            parts["whole_" + m] = (lambda f=f: f(False))
        with torch.no_grad():
            rows += _rounds(parts, rounds, reps, {"K": k, "what": "forward, no grad"})
        del h, w, fns, z
        torch.cuda.empty_cache()
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--parts", default="det,fwd")
    ap.add_argument("--ks", default="2,20,64")
    ap.add_argument("--fwd-ks", default="2048,4096")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load": os.getloadavg()}
    for part in a.parts.split(","):
        res[part] = (det(ints(a.ks), a.variants.split(","), a.rounds, a.reps) if part == "det"
                     else fwd(ints(a.fwd_ks), a.rounds, a.reps))
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
