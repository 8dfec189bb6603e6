"""Does a change slow `pack`? Two source trees (before, after), each run as fresh processes of
bench/pack_e2e_pretok.py's packtool case (pre-tokenized Parquet -> ingest into a fresh cache
-> plan -> slabs + manifest, C=8192, bfd, --overflow split), alternating before / after so
that the shared machine's load falls on both alike. Prints every run (wall and CPU seconds of
the call), the load before each, the after/before ratio of the medians and, since a 2% bound
is finer than the run-to-run spread, the ratio within each adjacent before/after pair (the
pair shares the machine's state): their median and a bootstrap 90% interval of that median.

    python bench/pack_before_after.py --before /path/to/old/tree --after . --n 1000000 --repeat 5

`--chat-rows N` measures the raw chat path instead (the tokenize pipeline the pre-tokenized case
skips): N distinct Taskmaster chats (bench/chat_memory.py's input) in JSON Lines -> `python -P -m
packtool pack` with gpt2 + chatml, C=4096, --overflow split, a fresh cache and output each run;
wall, the child's CPU and peak RSS (wait4).

The pre-tokenized child imports packtool before pyarrow, as `packtool pack` does, so each tree
runs on the Arrow pool and jemalloc settings its own package picks (before stop 39 the child
loaded pyarrow first and both trees ran on pyarrow's mimalloc). `--env SIDE:K=V` sets a variable
in one side's children only: the same tree on both sides with another allocator setting.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def one(tree: str, kind: str, n: int, work: str, pool: str | None = None, extra: dict | None = None) -> dict:
    env = {**os.environ, "PYTHONPATH": tree, **(extra or {})}
    if pool:
        env["ARROW_DEFAULT_MEMORY_POOL"] = pool
    p = subprocess.run([sys.executable, os.path.join(tree, "bench", "pack_e2e_pretok.py"), "--case",
                        f"{kind}:{n}", "--work", work], capture_output=True, text=True, cwd=tree, env=env)
    lines = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
    if not lines:
        raise SystemExit(f"{tree}: no result\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    return json.loads(lines[-1][7:])


def one_chat(tree: str, data: str, work: str, extra: dict | None = None) -> dict:
    import shutil
    import time
    from chat_memory import SHARED
    shutil.rmtree(work, ignore_errors=True)
    cmd = [sys.executable, "-P", "-m", "packtool", "pack", data, "--tokenizer",
           os.path.join(SHARED, "tokenizers", "gpt2", "tokenizer.json"), "--chat-template", "chatml", "-C", "4096",
           "--overflow", "split", "--cache-dir", os.path.join(work, "cache"), "-o", os.path.join(work, "out"),
           "--no-progress"]
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": tree, **(extra or {})}, cwd=tree, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{tree}: pack failed\n{err.decode(errors='replace')[-3000:]}")
    shutil.rmtree(work, ignore_errors=True)
    return {"seconds": wall, "cpu_seconds": ru.ru_utime + ru.ru_stime, "max_rss_mib": ru.ru_maxrss / 1024}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "packtool_bench_ab"))
    ap.add_argument("--log", help="append the runs as one JSON line here")
    ap.add_argument("--arrow-pool", choices=("jemalloc", "mimalloc", "system"),
                    help="Arrow's default memory pool in both trees' children (default: the one packtool picks)")
    ap.add_argument("--chat-rows", type=int, help="the raw chat path with this many rows (see above)")
    ap.add_argument("--env", action="append", default=[], metavar="SIDE:K=V",
                    help="set K=V in one side's children only (SIDE: before|after), e.g. "
                         "after:JE_ARROW_MALLOC_CONF=dirty_decay_ms:0 with the same tree on both sides")
    a = ap.parse_args()
    envs: dict[str, dict] = {"before": {}, "after": {}}
    for item in a.env:
        side, _, kv = item.partition(":")
        if side not in envs or "=" not in kv:
            ap.error(f"--env {item!r}: give SIDE:K=V with SIDE before or after")
        envs[side].update([kv.split("=", 1)])
    trees = {"before": os.path.abspath(a.before), "after": os.path.abspath(a.after)}
    works = {k: os.path.join(a.work, k) for k in trees}
    if a.chat_rows:
        from chat_memory import REAL_CHATS, make_data
        os.makedirs(a.work, exist_ok=True)
        data = os.path.join(a.work, f"chat_{a.chat_rows}.jsonl")
        make_data(data, a.chat_rows, REAL_CHATS)
        run = lambda k: one_chat(trees[k], data, works[k], envs[k])  # noqa: E731
    else:
        run = lambda k: one(trees[k], "packtool", a.n, works[k], a.arrow_pool, envs[k])  # noqa: E731
    for k, t in trees.items():  # numba's cache and the input file, not timed
        os.makedirs(works[k], exist_ok=True)
        if a.chat_rows:
            run(k)
        else:
            one(t, "warm", a.n, works[k], a.arrow_pool, envs[k])
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for i in range(a.repeat):
        order = ("before", "after") if i % 2 == 0 else ("after", "before")
        for k in order:
            load = os.getloadavg()[0]
            r = run(k)
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
            f.write(json.dumps({"n": a.n, "chat_rows": a.chat_rows, "trees": trees, "arrow_pool": a.arrow_pool, "env": envs, "runs": runs}) + "\n")


def _interval(ratios: list[float], draws: int = 2000) -> tuple[float, float]:
    """A bootstrap 90% interval of the median pair ratio (seeded: the same runs give the same line)."""
    import random
    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    return meds[int(0.05 * draws)], meds[int(0.95 * draws) - 1]


if __name__ == "__main__":
    main()
