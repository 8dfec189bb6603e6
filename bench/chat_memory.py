"""Peak RSS of a raw chat pack by stage, as the row count grows (issue 23 class 8).

Each run is a fresh process that packs N chat rows (the taskmaster fixture's 200
conversations, repeated with fresh ids) from JSON Lines with gpt2 + chatml, C=4096,
`--overflow split`, a fresh cache and output; a thread samples VmRSS every 20 ms and files the
peak under the stage running then (imports, tokenize, plan+write). Runs alternate over N.

    python bench/chat_memory.py --rows 10000,100000 --repeat 2 [--trace] [--env MALLOC_ARENA_MAX=2] [--src TREE]

VmRSS is what is compared; its anonymous and file-backed parts at each peak are printed too
(mapped cache files count in VmRSS but are the page cache's).
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "fixtures")
CHILD = r"""
import json, os, sys, threading, time
stage, peaks = ["imports"], {}
anon = {}
def rss():
    with open("/proc/self/status") as f:
        got = {l.split(":")[0]: int(l.split()[1]) // 1024 for l in f if l.startswith(("VmRSS", "RssAnon", "RssFile"))}
    return got
def sample():
    while True:
        got = rss()
        if got["VmRSS"] > peaks.get(stage[0], 0):
            peaks[stage[0]] = got["VmRSS"]
            anon[stage[0]] = (got["RssAnon"], got["RssFile"])
        time.sleep(0.02)
threading.Thread(target=sample, daemon=True).start()
import packtool.packing as pk
from packtool import Alignment, PackingConfig, TokenizeConfig
orig_tok, orig_pc = pk.tokenize_to_cache, pk.pack_cache
def tok(*a, **k):
    stage[0] = "tokenize"
    r = orig_tok(*a, **k)
    if os.environ.get("TRACE"):
        import tracemalloc
        for st in tracemalloc.take_snapshot().statistics("lineno")[:8]:
            print("  ", st, file=sys.stderr)
    return r
def pc(*a, **k):
    stage[0] = "plan+write"
    return orig_pc(*a, **k)
pk.tokenize_to_cache, pk.pack_cache = tok, pc
if os.environ.get("TRACE"):
    import tracemalloc
    tracemalloc.start(6)
data, tokenizer, work = sys.argv[1:4]
t0 = time.perf_counter()
pk.pack([data], Alignment(capacity=4096), PackingConfig(overflow="split"),
        TokenizeConfig(tokenizer=tokenizer, chat_template="chatml"),
        output=os.path.join(work, "out"), cache_dir=os.path.join(work, "cache"))
wall = time.perf_counter() - t0
stage[0] = "end"
time.sleep(0.05)
import resource
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"peaks_mib": peaks, "anon_file_at_peak_mib": anon, "wall_s": round(wall, 1),
                  "cpu_s": round(ru.ru_utime + ru.ru_stime, 1)}))
"""


def make_data(path: str, n: int) -> None:
    rows = [json.loads(line) for line in gzip.open(os.path.join(FIX, "data", "taskmaster4_chat_200.jsonl.gz"), "rt")]
    with open(path, "w") as f:
        for i in range(n):
            r = dict(rows[i % len(rows)])
            r["id"] = f"r{i}"
            f.write(json.dumps(r) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="10000,100000")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--trace", action="store_true", help="tracemalloc's top sites after tokenizing (slow)")
    ap.add_argument("--src", default=ROOT, help="packtool source tree to measure")
    ap.add_argument("--env", action="append", default=[], metavar="K=V", help="set in the child (e.g. MALLOC_ARENA_MAX=2)")
    a = ap.parse_args()
    tok = os.path.join(FIX, "tokenizers", "gpt2", "tokenizer.json")
    base = tempfile.mkdtemp(prefix="chat-memory-")
    try:
        ns = [int(x) for x in a.rows.split(",")]
        for n in ns:
            make_data(os.path.join(base, f"chat_{n}.jsonl"), n)
        for rep in range(a.repeat):
            for n in ns:
                work = os.path.join(base, f"w{n}")
                shutil.rmtree(work, ignore_errors=True)
                env = dict(os.environ, PYTHONPATH=a.src, **({"TRACE": "1"} if a.trace else {}))
                env.pop("ARROW_DEFAULT_MEMORY_POOL", None)
                env.update(kv.split("=", 1) for kv in a.env)
                load = os.getloadavg()[0]
                # -P: `-c` would put the working directory (a checkout) ahead of --src on sys.path
                p = subprocess.run([sys.executable, "-P", "-c", CHILD, os.path.join(base, f"chat_{n}.jsonl"), tok, work],
                                   env=env, capture_output=True, text=True)
                if p.returncode:
                    sys.exit(p.stderr)
                if a.trace:
                    print(p.stderr, file=sys.stderr)
                r = json.loads(p.stdout.strip().splitlines()[-1])
                print(json.dumps({"rows": n, "run": rep, "env": a.env, "src": a.src, "load_1min": round(load, 1), **r}),
                      flush=True)
                shutil.rmtree(work, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
