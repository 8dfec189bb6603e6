"""Does a change slow `pack`? Two source trees (before, after), each run as fresh processes of
bench/pack_e2e_pretok.py's packtool case (pre-tokenized Parquet -> ingest into a fresh cache
-> plan -> slabs + manifest, C=8192, bfd, --overflow split), alternating before / after so
that the shared machine's load falls on both alike. Prints every run (wall and CPU seconds of
the call), the load before each, the after/before ratio of the medians and, since a 2% bound
is finer than the run-to-run spread, the ratio within each adjacent before/after pair (the
pair shares the machine's state): their median and a bootstrap 90% interval of that median.

    python bench/pack_before_after.py --before /path/to/old/tree --after . --n 1000000 --repeat 5

The child loads pyarrow before packtool, so both trees run on pyarrow's default pool (mimalloc)
unless `--arrow-pool jemalloc` (what `packtool pack` picks) is given.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def one(tree: str, kind: str, n: int, work: str, pool: str | None = None) -> dict:
    env = {**os.environ, "PYTHONPATH": tree}
    if pool:
        env["ARROW_DEFAULT_MEMORY_POOL"] = pool
    p = subprocess.run([sys.executable, os.path.join(tree, "bench", "pack_e2e_pretok.py"), "--case",
                        f"{kind}:{n}", "--work", work], capture_output=True, text=True, cwd=tree, env=env)
    lines = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
    if not lines:
        raise SystemExit(f"{tree}: no result\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    return json.loads(lines[-1][7:])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "packtool_bench_ab"))
    ap.add_argument("--log", help="append the runs as one JSON line here")
    # the child loads pyarrow (the input maker) before packtool, so without this both trees run
    # on pyarrow's default pool (mimalloc), not the jemalloc that `packtool pack` picks
    ap.add_argument("--arrow-pool", choices=("jemalloc", "mimalloc", "system"),
                    help="Arrow's default memory pool in both trees' children (default: as the child loads it)")
    a = ap.parse_args()
    trees = {"before": os.path.abspath(a.before), "after": os.path.abspath(a.after)}
    works = {k: os.path.join(a.work, k) for k in trees}
    for k, t in trees.items():  # numba's cache and the input file, not timed
        os.makedirs(works[k], exist_ok=True)
        one(t, "warm", a.n, works[k], a.arrow_pool)
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for i in range(a.repeat):
        order = ("before", "after") if i % 2 == 0 else ("after", "before")
        for k in order:
            load = os.getloadavg()[0]
            r = one(trees[k], "packtool", a.n, works[k], a.arrow_pool)
            runs[k].append(r)
            print(f"{k:6s} run {i}: {r['seconds']:.2f} s wall, {r['cpu_seconds']:.2f} s cpu "
                  f"(load {load:.2f})", flush=True)
    med = {k: (statistics.median(r["seconds"] for r in v), statistics.median(r["cpu_seconds"] for r in v))
           for k, v in runs.items()}
    for k, (w, c) in med.items():
        print(f"{k:6s} median {w:.2f} s wall, {c:.2f} s cpu; runs "
              + " / ".join(f"{r['seconds']:.2f}" for r in runs[k]))
    print(f"after/before: wall {med['after'][0] / med['before'][0]:.3f}, "
          f"cpu {med['after'][1] / med['before'][1]:.3f}; load now {os.getloadavg()}")
    for key in ("seconds", "cpu_seconds"):
        ratios = [a[key] / b[key] for a, b in zip(runs["after"], runs["before"])]
        lo, hi = _interval(ratios)
        print(f"pairs {key}: after/before median {statistics.median(ratios):.3f} "
              f"(90% interval {lo:.3f}-{hi:.3f}); pairs " + " / ".join(f"{r:.3f}" for r in ratios))
    if a.log:
        with open(a.log, "a") as f:
            f.write(json.dumps({"n": a.n, "trees": trees, "arrow_pool": a.arrow_pool, "runs": runs}) + "\n")


def _interval(ratios: list[float], draws: int = 2000) -> tuple[float, float]:
    """A bootstrap 90% interval of the median pair ratio (seeded: the same runs give the same line)."""
    import random
    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    return meds[int(0.05 * draws)], meds[int(0.95 * draws) - 1]


if __name__ == "__main__":
    main()
