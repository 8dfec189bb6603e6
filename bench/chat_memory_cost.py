"""What the heap bounds of issue 23 class 8 cost a raw chat tokenize (or pack): A/B in
alternating fresh processes. A: as shipped (glibc's mmap threshold fixed while tokenizing, a
HeapBound checked after each encode chunk, trimming over its slack); B: both replaced by
no-ops. Each run tokenizes (`--job pack`: packs, C=4096, `--overflow split`) N chat rows
(bench/chat_memory.py's data) into a fresh cache and reports the process CPU seconds and minor
page faults of that call alone (imports, the tokenizer's load and numba's start-up are left
out by a warm-up call on 200 rows), and in A the heap checks' and trims' counts and the
checks' own thread CPU (trims included).

    python bench/chat_memory_cost.py --rows 2000 --pairs 8 [--job tokenize|pack] [--src TREE] > OUT.jsonl

Per pair: CPU A / CPU B. On a shared machine read the spread of the pair ratios, and the page
faults (a count, not a time: what the trims make the next chunk fault in again).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from chat_memory import FIX, make_data  # noqa: E402

CHILD = r"""
import json, os, resource, sys, time
import packtool.packing as pk
import packtool.tokenize.pipeline as pl
from packtool import Alignment, PackingConfig, TokenizeConfig, heap
data, warm, tok, work, arm, job = sys.argv[1:7]
trims = [0, 0.0, 0]
if arm == "B":
    heap.HeapBound.check = lambda self: None
    pl.bound_heap = lambda: None
else:
    real, real_trim = heap.HeapBound.check, heap.trim
    def timed(self):
        t = time.thread_time()
        real(self)
        trims[2] += 1
        trims[1] += time.thread_time() - t
    def counted():
        trims[0] += 1
        real_trim()
    heap.HeapBound.check, heap.trim = timed, counted
cfg = TokenizeConfig(tokenizer=tok, chat_template="chatml")
def run(path, name):
    if job == "pack":
        pk.pack([path], Alignment(capacity=4096), PackingConfig(overflow="split"), cfg,
                output=os.path.join(work, name + "-out"), cache_dir=os.path.join(work, name), progress=False)
    else:
        pl.tokenize_to_cache([path], cfg, os.path.join(work, name), progress=False)
run(warm, "warm")
trims[:] = [0, 0.0, 0]
r0 = resource.getrusage(resource.RUSAGE_SELF)
run(data, "cache")
r1 = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"cpu_s": round(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, 3),
                  "sys_s": round(r1.ru_stime - r0.ru_stime, 3), "minflt": r1.ru_minflt - r0.ru_minflt,
                  "checks": trims[2], "trims": trims[0], "check_cpu_s": round(trims[1], 3)}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--job", choices=("tokenize", "pack"), default="tokenize")
    ap.add_argument("--src", default=ROOT)
    a = ap.parse_args()
    tok = os.path.join(FIX, "tokenizers", "gpt2", "tokenizer.json")
    base = tempfile.mkdtemp(prefix="chat-memory-cost-")
    try:
        data, warm = os.path.join(base, "data.jsonl"), os.path.join(base, "warm.jsonl")
        make_data(data, a.rows)
        make_data(warm, 200)
        for pair in range(a.pairs):
            got = {}
            for arm in ("AB" if pair % 2 == 0 else "BA"):
                work = os.path.join(base, "work")
                shutil.rmtree(work, ignore_errors=True)
                load = os.getloadavg()[0]
                p = subprocess.run([sys.executable, "-P", "-c", CHILD, data, warm, tok, work, arm, a.job],
                                   env=dict(os.environ, PYTHONPATH=a.src), capture_output=True, text=True)
                if p.returncode:
                    sys.exit(p.stderr)
                got[arm] = r = json.loads(p.stdout.strip().splitlines()[-1])
                print(json.dumps({"pair": pair, "arm": arm, "job": a.job, "rows": a.rows, "load_1min": round(load, 1), **r}),
                      flush=True)
            print(json.dumps({"pair": pair, "cpu_ratio_A_over_B": round(got["A"]["cpu_s"] / got["B"]["cpu_s"], 4)}),
                  flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
