"""Pack from a tokenized cache (plan + write Parquet) against TRL's pack_dataset(strategy="bfd").

Same lengths for both: N sequences resampled from the gpt2 token lengths of every record in
../shared/data (about 308 tokens each), C=8192, random int32 token ids. Every case runs in a
fresh subprocess (the tokenized cache is made beforehand by another one); peak RSS is sampled
every 5 ms and reported as growth over the RSS just before the timed call (after imports and
after the input is ready). packtool's side: plan + Parquet write of `pack_cache`, `--overflow
split`, with the flat token store that tokenization writes, with `--workers 1`, and with the
store rebuilt from the cache's Parquet. TRL's side: `pack_dataset` as SFTTrainer runs it (map
batches of 1,000 rows) and over the whole dataset at once (one batch). Writes the `Pack end
to end` section of BENCHMARKS.md.

    python bench/pack_e2e.py --sizes 100000 1000000
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
C = 8192


def _lengths(n: int) -> np.ndarray:
    d = json.load(open(os.path.join(ROOT, "..", "shared", "data", "token_lengths_by_source.json")))
    pool = np.concatenate([np.asarray(v["gpt2"]["lengths"], np.int64) for v in d["sources"].values()])
    return np.random.default_rng(0).choice(pool, n)


def _rss() -> int:
    """RSS of this process and every child (the writer's worker processes count too)."""
    import psutil
    me = psutil.Process()
    total = me.memory_info().rss
    for c in me.children(recursive=True):
        try:
            total += c.memory_info().rss
        except psutil.Error:
            pass
    return total


class Peak:
    def __init__(self):
        self.base, self.peak, self._stop = _rss(), 0, False
        self.t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop:
            self.peak = max(self.peak, _rss())
            time.sleep(0.005)

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *a):
        self._stop = True
        self.t.join()
        self.peak = max(self.peak, _rss())

    @property
    def growth(self) -> int:
        return self.peak - self.base


def _make_input(n: int, work: str) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq
    path = os.path.join(work, f"tokens_{n}.parquet")
    if os.path.exists(path):
        return path
    lens = _lengths(n)
    rng = np.random.default_rng(1)
    with pq.ParquetWriter(path + ".tmp", pa.schema([("input_ids", pa.list_(pa.int32()))])) as w:
        for lo in range(0, n, 50_000):
            part = lens[lo:lo + 50_000]
            off = np.concatenate(([0], np.cumsum(part))).astype(np.int32)
            vals = rng.integers(0, 50257, int(off[-1]), dtype=np.int32)
            w.write_table(pa.table({"input_ids": pa.ListArray.from_arrays(off, vals)}))
    os.replace(path + ".tmp", path)
    return path


PACKTOOL_CASES = {  # case -> (workers, keep the flat store, label)
    "repack": (None, True, "flat store from tokenize"),
    "repack-w1": (1, True, "flat store from tokenize, --workers 1"),
    "repack-mimalloc": (None, True, "flat store from tokenize, Arrow pool mimalloc"),
    "first": (None, False, "flat store rebuilt from the cache"),
}
# Arrow reads its default pool from the environment when it loads. `packtool.packing` asks for
# jemalloc when it is imported first (as `packtool pack` does); this case keeps pyarrow's own
# default, as for a caller that imported pyarrow before packtool
CASE_ENV = {"packtool-repack-mimalloc": {"ARROW_DEFAULT_MEMORY_POOL": "mimalloc"}}
DEFAULT = "packtool bfd (flat store from tokenize)"  # the row TRL is compared with


def run_packtool(n: int, work: str, case: str) -> dict:
    """One pack in this (fresh) process. Warm-up: a plan of 1,000 rows (numba loads its
    on-disk cache of compiled code); nothing the size of the data runs before the baseline."""
    from packtool.align import Alignment
    from packtool.packing import pack_cache  # first, as the CLI imports it: it picks Arrow's pool
    from packtool.planning.core import PackingConfig
    from packtool.planning.core import plan as make_plan
    from packtool.tokenize import tokenize_to_cache
    from packtool.tokenize.config import TokenizeConfig
    from packtool.tokenize.flat_tokens import flat_store_for
    src = _make_input(n, work)
    cache = tokenize_to_cache([src], TokenizeConfig(shape="tokens"), cache_dir=os.path.join(work, "cache"),
                              progress=False)
    if case == "prepare":  # its own process: the measured ones only open the cache
        flat_store_for(cache)
        return {}
    workers, keep_flat, label = PACKTOOL_CASES[case]
    if not keep_flat:
        shutil.rmtree(os.path.join(cache.root, "flat"))  # the flat store build is part of the timed pack
    out = os.path.join(work, f"out_{n}")
    align, cfg = Alignment(capacity=C), PackingConfig("bfd", overflow="split")
    make_plan(cache.lengths()[:1000], align, cfg)
    import gc
    gc.collect()
    os.sync()  # the previous run's output, still dirty in the page cache, is not this run's cost
    t0 = time.perf_counter()
    with Peak() as pk:
        res = pack_cache(cache, align, cfg, out, overwrite=True, workers=workers)
    sec = time.perf_counter() - t0
    shutil.rmtree(out, ignore_errors=True)
    return dict(engine=f"packtool bfd ({label})", n=n, seconds=sec,
                tokens=res.summary.padding.real_tokens, rss_growth=pk.growth,
                bins=res.plan.num_slabs, lower_bound=res.plan.lower_bound)


def run_trl(n: int, work: str, batch: int | None) -> dict:
    import datasets
    from trl.data_utils import pack_dataset
    datasets.disable_progress_bars()
    datasets.disable_caching()  # every run packs for real, never reloads a cached map
    src = _make_input(n, work)
    ds = datasets.Dataset.from_parquet(src, cache_dir=os.path.join(work, "hf"))
    lens = _lengths(n)
    os.sync()  # as for packtool: no other run's dirty pages being written back meanwhile
    t0 = time.perf_counter()
    with Peak() as pk:
        mk = {"batch_size": batch if batch else n, "load_from_cache_file": False}
        packed = pack_dataset(ds, C, strategy="bfd", map_kwargs=mk)
        nb = len(packed)
    sec = time.perf_counter() - t0
    from packtool.align import Alignment
    from packtool.planning.core import apply_overflow
    segs, _ = apply_overflow(lens, Alignment(capacity=C), "truncate")
    return dict(engine=f"TRL bfd ({'1,000-row windows' if batch else 'whole dataset'})", n=n,
                seconds=sec, tokens=int(segs.length.sum()), rss_growth=pk.growth, bins=nb,
                lower_bound=Alignment(capacity=C).lower_bound(segs.length))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "packtool_bench_e2e"))
    ap.add_argument("--no-trl", action="store_true")
    ap.add_argument("--cases", nargs="+", default=list(PACKTOOL_CASES), choices=list(PACKTOOL_CASES))
    ap.add_argument("--no-write", action="store_true", help="print the table, leave BENCHMARKS.md")
    ap.add_argument("--repeat", type=int, default=1, help="runs per case (a shared machine): the "
                    "table keeps the fastest time and the largest RSS growth")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    if a.case:  # child process: one measurement
        kind, n = a.case.split(":")
        n = int(n)
        r = (run_packtool(n, a.work, kind.split("-", 1)[1]) if kind.startswith("packtool-")
             else run_trl(n, a.work, 1000 if kind == "trl1k" else None))
        if r:
            print("RESULT " + json.dumps(r))
        return
    rows, load = [], [os.getloadavg()]
    for n in a.sizes:
        kinds = ["packtool-prepare"] + [f"packtool-{c}" for c in a.cases] + ([] if a.no_trl else ["trl1k", "trlall"])
        for kind in kinds:
            runs = []
            for _ in range(1 if kind.endswith("prepare") else a.repeat):
                p = subprocess.run([sys.executable, __file__, "--case", f"{kind}:{n}", "--work", a.work],
                                   capture_output=True, text=True, env={**os.environ, **CASE_ENV.get(kind, {})})
                lines = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
                if not lines and not kind.endswith("prepare"):
                    print(p.stdout[-2000:], p.stderr[-4000:])
                runs += [json.loads(line[7:]) for line in lines]
                if runs:
                    print(runs[-1], flush=True)
            if runs:  # the fastest run, with the largest RSS growth of all runs
                best = dict(min(runs, key=lambda r: r["seconds"]))
                best["rss_growth"] = max(r["rss_growth"] for r in runs)
                best["runs"] = len(runs)
                rows.append(best)
    load.append(os.getloadavg())
    _write(rows, load, a.no_write)


def _write(rows: list[dict], load: list, dry: bool = False) -> None:
    from bench.md import update_section
    by_n = {}
    for r in rows:
        by_n.setdefault(r["n"], {})[r["engine"]] = r
    lines = ["| sequences | engine | seconds | tokens/s | peak RSS growth | bins | over lower bound | packtool speed-up, RSS ratio |",
             "|---|---|---|---|---|---|---|---|"]
    for n, d in by_n.items():
        ours = d.get(DEFAULT)
        for name, r in d.items():
            tps = r["tokens"] / r["seconds"]
            over = (r["bins"] - r["lower_bound"]) / r["lower_bound"]
            sp = "" if name.startswith("packtool") or not ours else (
                f"{(ours['tokens'] / ours['seconds']) / tps:.2f}x, "
                f"1/{r['rss_growth'] / max(ours['rss_growth'], 1):.1f}")
            lines.append(f"| {n:,} | {name} | {r['seconds']:.2f} | {tps / 1e6:.1f}M | "
                         f"{r['rss_growth'] / 2**20:,.0f} MiB | {r['bins']:,} | {100 * over:.3f}% | {sp} |")
    body = "\n".join([
        f"`python bench/pack_e2e.py` — measured {datetime.date.today()} on {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}; load average (1/5/15 min) "
        f"{'/'.join(f'{x:.2f}' for x in load[0])} before, {'/'.join(f'{x:.2f}' for x in load[1])} after. "
        f"Each row: the fastest of {rows[0].get('runs', 1) if rows else 1} runs, with the largest "
        f"RSS growth of those runs.",
        "",
        "Pack from a tokenized cache: N sequences resampled from the gpt2 token lengths of every "
        "record in ../shared/data (random int32 ids), C=8192. packtool = `pack_cache`: bfd plan "
        "with `--overflow split` (in row shards of 131,072 rows spilled to disk, the default) + "
        "zstd Parquet slabs with every FORMAT.md column, shards "
        "written by one thread per core (default) or one (`--workers 1`), token spans read from "
        "the flat store that tokenization writes beside the cache, or (last row) from one "
        "rebuilt from the cache's Parquet first. Arrow's memory pool is jemalloc, which "
        "`packtool.packing` asks for when it is the one to load pyarrow (as `packtool pack` does); "
        "the 'Arrow pool mimalloc' row keeps pyarrow's default, as for a caller that imported "
        "pyarrow before packtool. The speed-up column compares the default row (first) with "
        "TRL. TRL = `trl.data_utils.pack_dataset(strategy='bfd')` from a "
        "`datasets` table of the same rows (TRL truncates sequences over C; its bound is over "
        "the truncated lengths), as SFTTrainer runs it (1,000-row map windows) and over the "
        "whole dataset at once; its output stays an Arrow table (no Parquet write). Each row is "
        "a fresh process (warm-up: a plan of 1,000 rows, nothing the size of the data); RSS "
        "growth = peak RSS of the process and any children, sampled every 5 ms, minus RSS just "
        "before the call. packtool reads the token spans of each row group with pread from "
        "its flat store, so no page of the store is mapped into the process.",
        "", *lines])
    if not dry:
        update_section("Pack end to end (from the tokenized cache)", body)
    print(body)


if __name__ == "__main__":
    main()
