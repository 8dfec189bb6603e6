"""Where impl='auto''s forward-only time goes at the shapes where it was slower than the
full-vocab fused log-prob (issue 22: K 2048 / 4096 spread over a TP share of the vocabulary), on a
GPU. Per shape (N, H, V_local, K_local), interleaved rounds, median (min-max) of per-round medians:

  whole_auto / whole_dense / whole_full   the calls as the sweep times them (no grad)
  checks        the support checks with auto's probe and the repeated-id bitmaps, their one host
                sync included
  gemm          the chunked GEMMs into the [C, V] buffer alone
  gemm_rowstats the full head's GEMM + row-statistics kernel per chunk (no Python around it)
  dls           the dense path's GEMM + buffer kernel

then one profiled call of auto and of the full head: every GPU kernel's time, the GPU's idle gaps
between kernels (> 3 us, with the kernels on either side) and before the first one.

    python bench/support_fwd_gap.py --out OUT/fwd_gap.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.support_det_profile import _ms  # noqa: E402  (median of CUDA-event times)
from bench.support_logprob import inputs, methods  # noqa: E402
from packtool.kernels import row_stats  # noqa: E402
from packtool.kernels import support_kernels as SK  # noqa: E402
from packtool.kernels import support_path as SP  # noqa: E402
from packtool.kernels.support_check import check_support  # noqa: E402
from packtool.kernels.support_torch import _dense_rows  # noqa: E402

SHAPES = ((16384, 2048, 18992, 512), (16384, 2048, 18992, 256), (16384, 4096, 18992, 512),
          (16384, 2048, 75968, 2048), (16384, 4096, 151936, 2048))


def log(*a):
    print(*a, flush=True)


def _profile(fn, path):
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    prof.export_chrome_trace(path)
    with open(path) as f:
        ev = json.load(f)["traceEvents"]
    gpu = sorted((e for e in ev if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")),
                 key=lambda e: e["ts"])
    cpu = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "python_function", "user_annotation")]
    t0 = min(e["ts"] for e in cpu) if cpu else gpu[0]["ts"]
    kern, gaps = [], []
    for i, e in enumerate(gpu):
        kern.append([e["name"][:60], round(e["dur"], 1)])
        if i and e["ts"] - (gpu[i - 1]["ts"] + gpu[i - 1]["dur"]) > 3:
            gaps.append([round(e["ts"] - gpu[i - 1]["ts"] - gpu[i - 1]["dur"], 1), gpu[i - 1]["name"][:40], e["name"][:40]])
    busy = sum(e["dur"] for e in gpu)
    span = gpu[-1]["ts"] + gpu[-1]["dur"] - gpu[0]["ts"]
    return {"kernels_us": kern, "gaps_us": gaps, "busy_us": round(busy, 1), "span_us": round(span, 1),
            "first_kernel_after_us": round(gpu[0]["ts"] - t0, 1)}


def shape(n, hdim, vl, kl, rounds, reps):
    h, w, samp, sup, up = inputs(n, hdim, vl, kl, seed=kl)
    fns = methods(h, w, samp, sup, up, ["auto", "dense", "full_fused"])
    hd, wd = h.detach(), w.detach()
    probe = SP.probe_rows("auto", True, hd, wd, n, kl)
    rows_ = check_support(samp, sup, vl, 0, vl, use_triton=True, probe_rows=probe)
    chunk = min(n, _dense_rows(hd, wd, wd.dtype))
    buf = torch.empty(chunk, vl, dtype=wd.dtype, device="cuda")

    def gemm(stats=None):
        for s in range(0, n, chunk):
            x = buf[: min(n, s + chunk) - s]
            torch.mm(hd[s:s + x.shape[0]], wd.t(), out=x)
            if stats:
                stats(x, s)

    t_local = samp
    parts = {
        "whole_full": lambda: fns["full_fused"](False),
        "whole_auto": lambda: fns["auto"](False),
        "whole_dense": lambda: fns["dense"](False),
        "checks": lambda: check_support(samp, sup, vl, 0, vl, use_triton=True, probe_rows=probe),
        "gemm": gemm,
        "gemm_rowstats": lambda: gemm(lambda x, s: row_stats.row_stats_triton(x, t_local[s:s + x.shape[0]], 1 / 0.9)),
        "dls": lambda: SK.dense_logits_stats(hd, wd, rows_.cands, rows_.pos, 1 / 0.9, False),
    }
    res = {m: [] for m in parts}
    with torch.no_grad():
        for _ in range(rounds):
            for m, fn in parts.items():
                res[m].append(_ms(fn, reps))
        r = {"N": n, "H": hdim, "V_local": vl, "K_local": kl, "probe_rows": probe,
             "auto_path": SP.auto_path(hd, wd, rows_)[0]}
        for m, t in res.items():
            t = sorted(t)
            r[m] = [round(t[len(t) // 2], 4), round(t[0], 4), round(t[-1], 4)]
        log(json.dumps(r))
        r["profile_auto"] = _profile(parts["whole_auto"], f"/tmp/trace_auto_{kl}.json")
        r["profile_full"] = _profile(parts["whole_full"], f"/tmp/trace_full_{kl}.json")
        for k in ("profile_auto", "profile_full"):
            p = r[k]
            log(k, "busy", p["busy_us"], "span", p["span_us"], "first", p["first_kernel_after_us"],
                "gaps", p["gaps_us"])
            log("   ", p["kernels_us"])
    del h, w, fns, buf
    torch.cuda.empty_cache()
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--shapes", type=int, default=len(SHAPES))
    a = ap.parse_args()
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load": os.getloadavg(), "rows": []}
    for s in SHAPES[: a.shapes]:
        res["rows"].append(shape(*s, a.rounds, a.reps))
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
