"""Where the deterministic dW of the support gather path spends its time (kernels/support_kernels.py),
against the atomic one: the sort of the (token, candidate) pairs by weight row alone, the whole
deterministic dW (sort, piece bookkeeping with its host sync, the segment-sum launches), and the
atomic kernel; N 16k, H 4096, V 151,936, bf16 hidden, supports as bench/support_logprob.py makes
them. Interleaved rounds, median and min-max of the per-round medians.

    python bench/support_det_profile.py --out OUT/det_profile.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.support_logprob import make_support  # noqa: E402
from kernels import support_kernels as SK  # noqa: E402


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--ks", default="2,20,64")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    n, hdim, v = 16384, 4096, 151936
    rows = []
    for k in (int(x) for x in a.ks.split(",")):
        g = torch.Generator(device="cuda").manual_seed(k)
        h = torch.randn(n, hdim, generator=g, device="cuda").bfloat16()
        _, sup = make_support(n, v, k, g)
        local = sup.contiguous()
        grad = torch.randn(n, k, generator=g, device="cuda")
        dw = torch.zeros(v, hdim, device="cuda")
        parts = {"sort_only": lambda: SK.sorted_pairs(local),
                 "det_total": lambda: SK.grad_weight_sorted_(dw, grad, h, local),
                 "atomic": lambda: SK.grad_weight_triton_(dw, grad, h, local, False, True)}
        res = {m: [] for m in parts}
        for _ in range(a.rounds):
            for m, fn in parts.items():
                res[m].append(_ms(fn, a.reps))
        for m, t in res.items():
            t = sorted(t)
            r = {"K": k, "part": m, "ms": t[len(t) // 2], "min_max": [t[0], t[-1]]}
            rows.append(r)
            print(json.dumps(r), flush=True)
        del h, dw
        torch.cuda.empty_cache()
    with open(a.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load": os.getloadavg(),
                   "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
