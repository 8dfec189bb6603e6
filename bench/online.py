"""Per-step packing speed: packtool.online beside the real `skyrl` package (0.3.0).

    .venv/bin/pip install --no-deps skyrl==0.3.0
    .venv/bin/python bench/online.py [--sizes 64,512,...] [--reps 20] [--dp 8]

Lognormal lengths (mu=7, sigma=1, clipped to 1..C), C=16384, bin count a multiple of dp
(min_bin_count = bin_count_multiple = dp, as SkyRL's SFT collator asks). Each n runs in its
own fresh process; inside it the packers are called in alternation (one call of each per
round) after one untimed warm-up call each, and the table gives the median with the
[min, max] spread. SkyRL's FFD is O(n * bins): above --skyrl-ffd-max-n it is not run.
Start-up: import + first call of `pack_step` in fresh processes (numba cache warm), wall
and CPU time (the process's user+sys, which a busy shared machine inflates less).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
C = 16384


def lengths(n: int, seed: int = 0):
    import numpy as np
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(7.0, 1.0, n), 1, C).astype(np.int64)


def child(n: int, reps: int, dp: int, budget_s: float, run_ffd: bool) -> dict:
    """Alternating warm timings for one n (runs in a fresh process)."""
    import numpy as np

    from packtool.online import StepPacker
    from packtool.online.skyrl import load_reference, make_seq_packer

    sk = load_reference()
    x = lengths(n)
    xl = x.tolist()  # SkyRL's callers pass lists
    runs = {
        "skyrl_ffd": (lambda: sk.make_seq_packer("first_fit_decreasing", C, dp, dp).pack(xl))
        if run_ffd else None,
        "skyrl_balanced": lambda: sk.make_seq_packer("balanced", C, dp, dp).pack(xl),
        "pt_ffd": lambda: make_seq_packer("first_fit_decreasing", C, dp, dp).pack(xl),
        "pt_balanced": lambda: make_seq_packer("balanced", C, dp, dp).pack(xl),
        "pt_step": None,
    }
    step = StepPacker(capacity=C, algorithm="ffd", dp=dp)
    runs["pt_step"] = lambda: step.pack(x)
    bins, first, times = {}, {}, {k: [] for k, f in runs.items() if f is not None}
    for k in times:  # warm-up call (compile/cache load), untimed; also the bins
        out = first[k] = runs[k]()
        bins[k] = out.num_bins if hasattr(out, "num_bins") else len(out)
    t_start = time.perf_counter()
    for r in range(reps):
        for k in times:
            if k == "skyrl_ffd" and r and sum(times[k]) > budget_s:
                continue  # slow reference: stop once it used its time budget
            t0 = time.perf_counter()
            runs[k]()
            times[k].append(time.perf_counter() - t0)
        if time.perf_counter() - t_start > 4 * budget_s and r >= 2:
            break
    same = first["skyrl_ffd"] == first["pt_ffd"] if run_ffd else None
    same_bal = first["skyrl_balanced"] == first["pt_balanced"]
    return {"n": n, "bins": bins, "same_ffd": same, "same_balanced": same_bal,
            "times": times, "mean_len": float(np.mean(x))}


def startup(runs: int) -> list[tuple[float, float]]:
    """(import, first call) seconds: `import numpy, packtool.online`, then the first
    pack_step of 512 sequences, in fresh processes."""
    code = ("import time; t=time.perf_counter(); c=time.process_time(); import numpy as np; "
            "from packtool.online import pack_step; t1=time.perf_counter(); "
            "c1=time.process_time(); pack_step(np.arange(1, 513) * 7, capacity=16384, dp=8); "
            "print(t1 - t, time.perf_counter() - t1, c1 - c, time.process_time() - c1)")
    out = []
    for _ in range(runs):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, cwd=ROOT)
        out.append(tuple(float(v) for v in r.stdout.strip().splitlines()[-1].split()))
    return out


def fmt(ts: list[float]) -> str:
    if not ts:
        return "not run"
    med = statistics.median(ts) * 1e3
    lo, hi = min(ts) * 1e3, max(ts) * 1e3

    def f(v):
        return f"{v:.3f}" if v < 1 else (f"{v:.2f}" if v < 100 else f"{v:,.0f}")
    return f"{f(med)} ms [{f(lo)}-{f(hi)}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="64,256,512,1024,4096,16384,32768,65536,131072,262144,"
                    "1048576")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--dp", type=int, default=8)
    ap.add_argument("--budget-s", type=float, default=20.0,
                    help="time budget per n for SkyRL's FFD repetitions")
    ap.add_argument("--skyrl-ffd-max-n", type=int, default=65536)
    ap.add_argument("--startup-runs", type=int, default=5)
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child is not None:
        print(json.dumps(child(a.child, a.reps, a.dp, a.budget_s,
                               a.child <= a.skyrl_ffd_max_n)))
        return
    from packtool.online.skyrl import load_reference
    if load_reference() is None:
        sys.exit("skyrl is not installed: .venv/bin/pip install --no-deps skyrl==0.3.0")
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"python {platform.python_version()}, load {os.getloadavg()[0]:.2f} "
          f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})")
    results = []
    for n in [int(s) for s in a.sizes.split(",")]:
        r = subprocess.run([sys.executable, __file__, "--child", str(n), "--reps", str(a.reps),
                            "--dp", str(a.dp), "--budget-s", str(a.budget_s),
                            "--skyrl-ffd-max-n", str(a.skyrl_ffd_max_n)],
                           capture_output=True, text=True, check=True, cwd=ROOT)
        results.append(json.loads(r.stdout.strip().splitlines()[-1]))
        print(f"# n={n} done, load {os.getloadavg()[0]:.2f}", file=sys.stderr)
    print(f"\nmedian per call [min-max], C={C}, dp={a.dp} (bin count a multiple of dp); "
          f"bins: SkyRL FFD / packtool FFD, SkyRL balanced / packtool balanced\n")
    print("| sequences | SkyRL FFD | SkyRL balanced | packtool FFD (drop-in) | "
          "packtool balanced (drop-in) | packtool pack_step (numpy) | bins FFD | "
          "bins balanced | same bins |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        t, b = r["times"], r["bins"]
        fb = f"{b.get('skyrl_ffd', '-')} / {b['pt_ffd']}"
        bb = f"{b['skyrl_balanced']} / {b['pt_balanced']}"
        same = ("yes" if r["same_balanced"] and r["same_ffd"] in (True, None) else "NO")
        print(f"| {r['n']:,} | {fmt(t.get('skyrl_ffd', []))} | {fmt(t['skyrl_balanced'])} | "
              f"{fmt(t['pt_ffd'])} | {fmt(t['pt_balanced'])} | {fmt(t['pt_step'])} | "
              f"{fb} | {bb} | {same} |")
    st = startup(a.startup_runs)

    def ms(v):
        return (f"{statistics.median(v) * 1e3:.0f} ms [{min(v) * 1e3:.0f}-"
                f"{max(v) * 1e3:.0f}]")
    print(f"\nstart-up, fresh processes, numba cache warm, {len(st)} runs, median [min-max]:"
          f"\n  wall: import numpy + packtool.online {ms([r[0] for r in st])}, first "
          f"pack_step (512 seqs, dp=8) {ms([r[1] for r in st])}, total "
          f"{ms([r[0] + r[1] for r in st])}\n  CPU (user+sys of the process, less "
          f"sensitive to a shared machine): import {ms([r[2] for r in st])}, first call "
          f"{ms([r[3] for r in st])}, total {ms([r[2] + r[3] for r in st])}; "
          f"load {os.getloadavg()[0]:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"results": results, "startup_s": st}, f, indent=1)


if __name__ == "__main__":
    main()
