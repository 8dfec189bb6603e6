"""Pack end to end with per-token side columns (issue 21): the same pre-tokenized Parquet file
packed three ways, each in a fresh process, runs alternating:
  tokens   `pack([file], C=8192, bfd, --overflow split, shape tokens)`: input_ids only (the
           side columns are in the file and not read), the protocol of bench/pack_e2e_pretok.py;
  floats   the same, keeping the two float32 columns (`--side-columns old_logprobs,advantages`);
  full     the same, keeping both and the 20-wide int32 support column
           (`--side-columns old_logprobs,advantages --support-columns support`).
Each run ingests into a fresh tokenized cache (flat store + side files), plans, writes the
slabs and the manifest: the whole job. The issue's goal: `full` <= 1.6x `tokens` in wall time
at 1M sequences, peak RSS flat from 100k up.

Input: N sequences (up to 100k in one file; 300k and 1M are folders of 3 and 10 copies of the
100k file: generating the support column is what takes long), lengths resampled from the gpt2 token lengths of ../shared/data (as
bench/pack_e2e.py), random ids; per row the first 40% of the tokens are the prompt:
old_logprobs is a log-prob per token (float32, 0 on the prompt), advantages one float per row
repeated on its response tokens (GRPO), support the sampler's candidates per response token:
the sampled id at a random place among 1..20 candidates (mean ~5), -1 padded at the end; prompt
tokens all -1 and loss_mask 0 (response tokens 1: the loss counts only tokens with support; inputs
before 2026-12-02 had no loss_mask, a support rule pack now refuses). `seconds` times the call alone, `process_seconds` spawn to output on disk;
cpu_seconds is user+sys of the call (all threads); peak RSS is ru_maxrss of the process; load
is printed before and after each run.

    python bench/pack_e2e_side.py --sizes 100000 300000 1000000 --repeat 2 --log bench/results/side/side_runs.jsonl
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

import numpy as np

from runlog import emit  # bench/ is on sys.path for `python bench/NAME.py`

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
C, K, VOCAB = 8192, 20, 50257
CASES = {"tokens": ((), ()), "floats": (("old_logprobs", "advantages"), ()),
         "full": (("old_logprobs", "advantages"), ("support",))}


BASE = 100_000  # larger inputs are copies of this file in a folder (generating is the slow part)


def make_input(n: int, work: str) -> str:
    """The input for n sequences: one file up to BASE; above, a folder of n // BASE copies of
    the BASE file (distinct files, the same rows: packtool reads the folder in order)."""
    if n > BASE and n % BASE == 0:
        folder = os.path.join(work, f"side_lm2_{n}")
        if not os.path.isdir(folder):
            one = make_input(BASE, work)
            os.makedirs(folder + ".tmp", exist_ok=True)
            for i in range(n // BASE):
                shutil.copyfile(one, os.path.join(folder + ".tmp", f"part-{i:03d}.parquet"))
            os.replace(folder + ".tmp", folder)
        return folder
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bench.pack_e2e import _lengths
    # with loss_mask: the prompt's empty support rows are legal; "2": distinct candidates, which
    # the support rule holds since S42-1 (an older file may repeat one)
    path = os.path.join(work, f"side_lm2_{n}.parquet")
    if os.path.exists(path):
        return path
    lens = _lengths(n)
    rng = np.random.default_rng(1)
    table = rng.integers(1, VOCAB, (1 << 16, K), dtype=np.int32)  # candidate offsets, drawn per token
    while True:  # distinct within a row: a candidate twice breaks the support rule
        srt = np.sort(table, axis=1)
        again = (srt[:, 1:] == srt[:, :-1]).any(axis=1)
        if not again.any():
            break
        table[again] = rng.integers(1, VOCAB, (int(again.sum()), K), dtype=np.int32)
    schema = pa.schema([("input_ids", pa.list_(pa.int32())), ("loss_mask", pa.list_(pa.uint8())),
                        ("old_logprobs", pa.list_(pa.float32())),
                        ("advantages", pa.list_(pa.float32())),
                        ("support", pa.list_(pa.list_(pa.int32(), K)))])
    with pq.ParquetWriter(path + ".tmp", schema, compression="zstd") as w:
        for lo in range(0, n, 5_000):
            part = lens[lo:lo + 5_000]
            off = np.concatenate(([0], np.cumsum(part))).astype(np.int32)
            T = int(off[-1])
            ids = rng.integers(0, VOCAB, T, dtype=np.int32)
            pos = np.arange(T) - np.repeat(off[:-1], part)  # token position in its row
            resp = pos >= np.repeat((part * 2) // 5, part)  # the last 60%: generated tokens
            lp = np.where(resp, -rng.exponential(1.0, T), 0).astype(np.float32)
            adv = np.where(resp, np.repeat(rng.standard_normal(part.size), part), 0).astype(np.float32)
            sup = np.full((T, K), -1, np.int32)
            r = np.flatnonzero(resp)
            k = np.minimum(rng.geometric(0.2, r.size), K)  # candidates kept by the top-p cut
            cand = (ids[r, None] + table[rng.integers(0, 1 << 16, r.size)]) % VOCAB  # never the sampled id
            j = np.arange(K)
            cand[j[None, :] >= k[:, None]] = -1
            at = (rng.random(r.size) * k).astype(np.int64)  # the sampled id's place among them
            cand[np.arange(r.size), at] = ids[r]
            sup[r] = cand
            o = pa.array(off)
            w.write_table(pa.Table.from_arrays([
                pa.ListArray.from_arrays(o, pa.array(ids)), pa.ListArray.from_arrays(o, pa.array(resp.astype(np.uint8))),
                pa.ListArray.from_arrays(o, pa.array(lp)),
                pa.ListArray.from_arrays(o, pa.array(adv)),
                pa.ListArray.from_arrays(o, pa.FixedSizeListArray.from_arrays(pa.array(sup.ravel()), K))],
                schema=schema))
    os.replace(path + ".tmp", path)
    return path


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _du(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def run(case: str, src: str, work: str) -> dict:
    from packtool.align import Alignment
    from packtool.packing import pack  # first: it picks Arrow's pool, as the CLI does
    from packtool.planning.core import PackingConfig
    from packtool.tokenize.config import TokenizeConfig
    side, support = CASES[case]
    cache, out = os.path.join(work, f"{case}-cache"), os.path.join(work, f"{case}-out")
    shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    args = (Alignment(capacity=C), PackingConfig("bfd", overflow="split"),
            TokenizeConfig(shape="tokens", side_columns=side, support_columns=support))
    os.sync()
    base = _rss()
    t0, c0 = time.perf_counter(), time.process_time()
    res = pack([src], *args, out, cache_dir=cache)
    sec, done_at = time.perf_counter() - t0, time.time()
    r = dict(case=case, seconds=sec, done_at=done_at, cpu_seconds=time.process_time() - c0,
             ingest_seconds=res.tokenize_seconds, write_seconds=res.write_seconds,
             tokens=res.summary.padding.real_tokens, peak_rss=_peak(), rss_growth=_peak() - base,
             slabs=res.plan.num_slabs, out_bytes=sum(s.bytes for s in res.shards), cache_bytes=_du(cache))
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    return r


def warm(work: str) -> None:
    """numba's on-disk cache of compiled code and the first pack's imports, once (not timed)."""
    src = make_input(200, work)
    for case in CASES:
        run(case, src, work)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--cases", nargs="+", default=list(CASES))
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "packtool_bench_side"))
    ap.add_argument("--make", action="store_true", help="only write the input files")
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--log", help="append every run as one JSON line here")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    if a.case:
        kind, n = a.case.split(":")
        if kind == "warm":
            warm(a.work)
            print("RESULT {}")
            return
        src = make_input(int(n), a.work)
        r = run(kind, src, a.work)
        r.update(n=int(n), input_bytes=_du(src) if os.path.isdir(src) else os.path.getsize(src))
        print("RESULT " + json.dumps(r))
        return
    if a.make:
        for n in a.sizes:
            make_input(n, a.work)
        return
    print(f"# {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}", flush=True)
    for n in a.sizes:
        make_input(n, a.work)  # here, not in a timed child: its ru_maxrss would hold the generated table
        for kind in ["warm"] + list(a.cases) * a.repeat:
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
            r.update(process_seconds=r.pop("done_at") - spawned, load_before=load0,
                     load_after=os.getloadavg(), time=time.strftime("%H:%M:%S"))
            emit(r, a.log)


if __name__ == "__main__":
    main()
