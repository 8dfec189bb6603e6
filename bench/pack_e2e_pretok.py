"""End to end from a pre-tokenized Parquet file to packed Parquet on disk: packtool against
TRL's pack_dataset(strategy="bfd") as SFTTrainer runs it.

Input: N sequences (`input_ids` list<int32>) whose lengths are resampled from the gpt2 token
lengths of every record in ../shared/data (about 308 tokens each), random ids (bench/pack_e2e.py
builds the file). Both sides start from that file in a fresh process and end with Parquet
written:
  packtool  `pack([file], C=8192, bfd, --overflow split, shape tokens)` into a fresh cache dir:
            ingest into the tokenized cache (for pre-tokenized inputs: the flat token store
            plus per-row Parquet parts, cache v3) + plan + slabs + manifest;
  TRL       `Dataset.from_parquet` (fresh datasets cache) -> `trl.data_utils.pack_dataset(ds,
            8192, strategy="bfd")` (map batches of 1,000 rows, SFTTrainer's default) ->
            `Dataset.to_parquet`.
Runs alternate packtool / TRL, each in its own process; `seconds` times the call alone,
`process_seconds` from spawning the interpreter to the output on disk (imports included); cpu_seconds (user+sys of the timed
call, all threads) is reported beside wall time because the machine is shared. Peak RSS is the process's ru_maxrss
(whole process, imports included); growth is that minus RSS just before the timed call.
tokens/s counts the input tokens for both sides. Load is printed before and after each run.

    python bench/pack_e2e_pretok.py --sizes 100000 1000000 3000000 --repeat 2 --log bench/results/ingest/ingest_runs_v3.jsonl
    python bench/ingest_table.py bench/results/ingest/ingest_runs_v3.jsonl   # medians per size
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time

from runlog import emit  # bench/ is on sys.path for `python bench/NAME.py`

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
C = 8192


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_packtool(src: str, work: str, warm: bool) -> dict:
    from packtool.align import Alignment
    from packtool.packing import pack  # first: it picks Arrow's pool, as the CLI does
    from packtool.planning.core import PackingConfig
    from packtool.tokenize.config import TokenizeConfig
    cache, out = os.path.join(work, "pt-cache"), os.path.join(work, "pt-out")
    shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    args = (Alignment(capacity=C), PackingConfig("bfd", overflow="split"), TokenizeConfig(shape="tokens"))
    if warm:  # numba's on-disk cache of compiled code, once per benchmark (not timed)
        import pyarrow as pa
        import pyarrow.parquet as pq
        tiny = os.path.join(work, "warm.parquet")
        pq.write_table(pa.table({"input_ids": pa.array([[1, 2, 3]] * 10, pa.list_(pa.int32()))}), tiny)
        pack([tiny], *args, os.path.join(work, "warm-out"), cache_dir=os.path.join(work, "warm-cache"),
             overwrite=True)
        return {}
    os.sync()
    base = _rss()
    t0, c0 = time.perf_counter(), time.process_time()
    res = pack([src], *args, out, cache_dir=cache)
    sec, done_at = time.perf_counter() - t0, time.time()
    r = dict(engine="packtool", seconds=sec, done_at=done_at, cpu_seconds=time.process_time() - c0, ingest_seconds=res.tokenize_seconds,
             tokens=res.summary.padding.real_tokens, peak_rss=_peak(), rss_growth=_peak() - base,
             bins=res.plan.num_slabs, lower_bound=res.plan.lower_bound,
             out_bytes=sum(s.bytes for s in res.shards))
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    return r


def run_trl(src: str, work: str) -> dict:
    import datasets
    from trl.data_utils import pack_dataset
    datasets.disable_progress_bars()
    hf, out = os.path.join(work, "trl-hf"), os.path.join(work, "trl-out.parquet")
    shutil.rmtree(hf, ignore_errors=True)
    os.sync()
    base = _rss()
    t0, c0 = time.perf_counter(), time.process_time()
    ds = datasets.Dataset.from_parquet(src, cache_dir=hf)
    t_read = time.perf_counter() - t0
    packed = pack_dataset(ds, C, strategy="bfd", map_kwargs={"batch_size": 1000, "load_from_cache_file": False})
    packed.to_parquet(out)
    sec, done_at = time.perf_counter() - t0, time.time()
    kept = sum(len(c.values) for c in packed.data.table.column("input_ids").chunks)  # TRL truncates at C
    r = dict(engine="TRL", seconds=sec, done_at=done_at, cpu_seconds=time.process_time() - c0, ingest_seconds=t_read, peak_rss=_peak(), rss_growth=_peak() - base,
             bins=len(packed), tokens=kept, out_bytes=os.path.getsize(out))
    shutil.rmtree(hf, ignore_errors=True)
    os.remove(out)
    return r


def _child(kind: str, n: int, work: str) -> dict:
    if kind != "TRL":
        # packtool before pyarrow, as `packtool pack` loads them: Arrow's pool and jemalloc's
        # settings are packtool's only when it is imported first (the input maker loads pyarrow)
        import packtool  # noqa: F401
    from bench.pack_e2e import _make_input
    src = _make_input(n, work)
    if kind == "warm":
        return run_packtool(src, work, warm=True)
    r = run_packtool(src, work, False) if kind == "packtool" else run_trl(src, work)
    if r:
        r.update(n=n, input_tokens=_input_tokens(src))
    return r


def _input_tokens(src: str) -> int:
    import pyarrow.parquet as pq
    total = 0
    pf = pq.ParquetFile(src)
    for g in range(pf.num_row_groups):
        col = pf.read_row_group(g, columns=["input_ids"]).column(0)
        total += sum(len(c.values) for c in col.chunks)
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "packtool_bench_e2e"))
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--log", help="append every run as one JSON line here")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    if a.case:
        kind, n = a.case.split(":")
        r = _child(kind, int(n), a.work)
        print("RESULT " + json.dumps(r))
        return
    print(f"# {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}", flush=True)
    for n in a.sizes:
        for kind in ["warm"] + ["packtool", "TRL"] * a.repeat:
            load0, spawned = os.getloadavg(), time.time()
            p = subprocess.run([sys.executable, __file__, "--case", f"{kind}:{n}", "--work", a.work],
                               capture_output=True, text=True, cwd=ROOT)
            lines = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
            if not lines:
                print(p.stdout[-2000:], p.stderr[-4000:], flush=True)
                continue
            r = json.loads(lines[-1][7:])
            if not r:
                continue
            # process_seconds: from spawning the fresh interpreter to the output on disk, imports
            # included (what a user's `packtool pack` / script costs); `seconds` is the call alone
            r.update(process_seconds=r.pop("done_at") - spawned, load_before=load0,
                     load_after=os.getloadavg(), time=time.strftime("%H:%M:%S"))
            emit(r, a.log)


if __name__ == "__main__":
    main()
