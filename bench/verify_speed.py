"""verify and inspect speed on the 10x real set (BENCHMARKS.md, "Verify and inspect").

Lengths: every record of ../shared/data (mistral-7b-v0.1 token counts), repeated 10 times
(281,880 sequences, 91.6M tokens). Tokens: seeded random ids in the Mistral vocabulary with a
no-loss prefix per row (so zstd sees realistic entropy). The output is written by the real
writer (`io.writer.write_shards`, pack's default shard and row-group sizes), so shards are
what `pack` writes. Timings are steady state: one warm-up run first (numba cache, the
process pool's start), then the best and median of --runs. Peak RSS is sampled from the
worker processes (psutil) while verify runs.

    python bench/verify_speed.py [--runs 3] [--work /tmp/packtool-bench-verify]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from packtool.align import Alignment  # noqa: E402
from packtool.packing import manifest_stats as _stats  # noqa: E402  (the manifest's stats block as pack writes it)
from packtool.planning.core import PackingConfig, plan  # noqa: E402
from packtool.planning.summary import plan_summary  # noqa: E402
from packtool.slabs.format import build_manifest, write_manifest  # noqa: E402
from packtool.slabs.names import manifest_file  # noqa: E402
from packtool.slabs.writer import write_shards  # noqa: E402
from packtool.tokenize.flat_tokens import TOKENS_FILE, FlatTokens, write_flat_store  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "token_lengths_by_source.json")
VOCAB = 32000
CONFIGS = {
    "tp1-cp1": (Alignment(capacity=8192), PackingConfig("bfd", overflow="split")),
    "tp4-cp2-blockwise-dp4": (Alignment(tp=4, cp=2, fp8="blockwise", capacity=8192),
                              PackingConfig("mffd", overflow="split", dp=4)),
}


def real_lengths(times: int = 10) -> np.ndarray:
    with open(DATA) as f:
        d = json.load(f)
    one = np.concatenate([v["mistral-7b-v0.1"]["lengths"] for v in d["sources"].values()])
    return np.tile(one.astype(np.int64), times)


def source_store(directory: str, lengths: np.ndarray) -> FlatTokens:
    if os.path.exists(os.path.join(directory, TOKENS_FILE)):
        return FlatTokens.open(directory)
    rng = np.random.default_rng(0)
    off = np.concatenate(([0], np.cumsum(lengths)))
    pos = np.arange(int(off[-1])) - np.repeat(off[:-1], lengths)
    return write_flat_store(directory, rng.integers(3, VOCAB, int(off[-1]), dtype=np.int32),
                            pos >= np.repeat(lengths // 3, lengths), off)


def write_output(out: str, lengths, tokens: FlatTokens, align, packing) -> float:
    if manifest_file(out):
        return 0.0
    t0 = time.perf_counter()
    os.makedirs(out, exist_ok=True)
    p = plan(lengths, align, packing)
    shards = write_shards(p, tokens, out, 0)
    stats = _stats(plan_summary(p), sum(x.loss_tokens for x in shards))
    tok = {"path": "synthetic", "pad_id": 0, "vocab_size": VOCAB}
    write_manifest(out, build_manifest(p, shards, stats, tok, {"fingerprint": "bench", "files": []}))
    return time.perf_counter() - t0


class PeakRss:
    """Max RSS of any one worker process (and of all of them together) while running, and the
    CPU seconds this process and its workers spent (a figure the machine's load barely moves)."""

    def __init__(self) -> None:
        import psutil
        self.me = psutil.Process()
        self.one = self.total = 0
        self.cpu = 0.0
        self._cpu0: dict = {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import psutil
        while not self._stop.is_set():
            rss = []
            for c in self.me.children(recursive=True):
                try:
                    rss.append(c.memory_info().rss)
                except psutil.Error:
                    pass
            for c in self.me.children(recursive=True):
                try:
                    t = c.cpu_times()
                    self._last[c.pid] = t.user + t.system
                except psutil.Error:
                    pass
            if rss:
                self.one = max(self.one, max(rss))
                self.total = max(self.total, sum(rss))
            time.sleep(0.02)

    def _cpu_now(self) -> dict:
        import psutil
        out = {}
        for c in [self.me] + self.me.children(recursive=True):
            try:
                t = c.cpu_times()
                out[c.pid] = t.user + t.system
            except psutil.Error:
                pass
        return out

    def __enter__(self):
        self._cpu0 = self._cpu_now()
        self._last: dict = {}
        self._t.start()
        return self

    def __exit__(self, *a):
        self._stop.set()
        self._t.join()
        end = {**self._last, **self._cpu_now()}
        self.cpu = sum(v - self._cpu0.get(pid, 0.0) for pid, v in end.items())


def timed(fn, runs: int):
    fn()  # warm-up: numba cache, pool start
    times, result = [], None
    with PeakRss() as rss:
        for _ in range(runs):
            t0 = time.perf_counter()
            result = fn()
            times.append(time.perf_counter() - t0)
    rss.cpu /= runs
    return result, min(times), statistics.median(times), rss


def cpu_self() -> float:
    import resource
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def one_core(fn, runs: int) -> float:
    """Least CPU seconds of `fn` in this process alone (workers=1): what one core needs,
    which the machine's other load barely changes, unlike wall time."""
    fn()
    best = float("inf")
    for _ in range(runs):
        c = cpu_self()
        fn()
        best = min(best, cpu_self() - c)
    return best


def decode_only(out: str) -> None:
    """The floor: read every column of every shard as verify does, check nothing."""
    import pyarrow.parquet as pq
    for f in sorted(os.listdir(out)):
        if f.endswith(".parquet"):
            for _ in pq.ParquetFile(os.path.join(out, f)).iter_batches(batch_size=128, use_threads=False):
                pass


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--work", default="/tmp/packtool-bench-verify")
    ap.add_argument("--workers", type=int, default=None)
    args = ap.parse_args()
    from packtool.inspection.packed import inspect_packed
    from packtool.inspection.planned import inspect_lengths
    from packtool.verification.run import verify
    lengths = real_lengths()
    tokens = source_store(os.path.join(args.work, "source"), lengths)
    rows = []
    for name, (align, packing) in CONFIGS.items():
        out = os.path.join(args.work, name)
        write_s = write_output(out, lengths, tokens, align, packing)
        size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out) if f.endswith(".parquet"))
        n_shards = sum(f.endswith(".parquet") for f in os.listdir(out))
        r, best, med, rss = timed(lambda: verify(out, workers=args.workers), args.runs)
        assert r.ok, r.problems[:3]
        rs, sbest, smed, srss = timed(lambda: verify(out, tokens_dir(args.work), workers=args.workers), args.runs)
        assert rs.ok, rs.problems[:3]
        cpu1 = one_core(lambda: verify(out, workers=1), args.runs)
        cpu1s = one_core(lambda: verify(out, tokens_dir(args.work), workers=1), args.runs)
        cpu_dec = one_core(lambda: decode_only(out), args.runs)
        _, ibest, imed, _ = timed(lambda: inspect_packed(out), args.runs)
        _, cbest, cmed, _ = timed(lambda: inspect_lengths(lengths, align, packing, compare=True), 1)
        rows.append(dict(
            config=name, shards=n_shards, mb=size / 1e6, slabs=r.slabs, physical_tokens=r.physical_tokens,
            write_s=write_s, verify_s=best, verify_median_s=med, verify_mtok_s=r.physical_tokens / best / 1e6,
            verify_cpu_s=rss.cpu, verify_mtok_cpu_s=r.physical_tokens / rss.cpu / 1e6,
            source_cpu_s=srss.cpu, load_avg=os.getloadavg()[0],
            one_core_cpu_s=cpu1, one_core_mtok_s=r.physical_tokens / cpu1 / 1e6,
            one_core_source_cpu_s=cpu1s, one_core_source_mtok_s=r.physical_tokens / cpu1s / 1e6,
            decode_only_cpu_s=cpu_dec, decode_only_mtok_s=r.physical_tokens / cpu_dec / 1e6,
            verify_worker_rss_mb=rss.one / 2**20, verify_workers_rss_mb=rss.total / 2**20,
            source_s=sbest, source_median_s=smed, source_mtok_s=r.physical_tokens / sbest / 1e6,
            source_worker_rss_mb=srss.one / 2**20, inspect_s=ibest, inspect_median_s=imed,
            inspect_compare_s=cbest))
        print(json.dumps(rows[-1]), flush=True)
    print(f"\nMeasured {time.strftime('%Y-%m-%d')} on {platform.machine()} ({os.cpu_count()} cores), "
          f"{lengths.size:,} sequences, {int(lengths.sum()):,} real tokens.\n")
    print("One core (workers=1, least CPU seconds of the runs):\n")
    print("| config | verify | verify --source | Parquet decode alone (the floor) |")
    print("|---|---|---|---|")
    for x in rows:
        print(f"| {x['config']} | {x['one_core_cpu_s']:.2f} CPU-s = {x['one_core_mtok_s']:.0f}M tokens/CPU-s | "
              f"{x['one_core_source_cpu_s']:.2f} CPU-s = {x['one_core_source_mtok_s']:.0f}M | "
              f"{x['decode_only_cpu_s']:.2f} CPU-s = {x['decode_only_mtok_s']:.0f}M |")
    print("\nBoth cores (process pool, wall clock):\n")
    print("| config | shards | MB | slabs | physical tokens | verify | tokens/s | CPU s (tokens per CPU-s) | "
          "worker RSS | verify --source | tokens/s | CPU s | worker RSS | inspect DIR | "
          "inspect --lengths --compare | load avg |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for x in rows:
        print(f"| {x['config']} | {x['shards']} | {x['mb']:.0f} | {x['slabs']:,} | {x['physical_tokens']:,} | "
              f"{x['verify_s']:.2f} s (median {x['verify_median_s']:.2f}) | {x['verify_mtok_s']:.0f}M | "
              f"{x['verify_cpu_s']:.2f} ({x['verify_mtok_cpu_s']:.0f}M) | "
              f"{x['verify_worker_rss_mb']:.0f} MiB | {x['source_s']:.2f} s (median {x['source_median_s']:.2f}) | "
              f"{x['source_mtok_s']:.0f}M | {x['source_cpu_s']:.2f} | {x['source_worker_rss_mb']:.0f} MiB | "
              f"{x['inspect_s']:.2f} s | {x['inspect_compare_s']:.2f} s | {x['load_avg']:.1f} |")


def tokens_dir(work: str) -> str:
    return os.path.join(work, "source")


if __name__ == "__main__":
    main()
