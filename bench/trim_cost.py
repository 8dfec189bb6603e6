"""What trimming the C heap while tokenizing costs (issue 23 class 8, packtool/heap.py): the
raw chat pack of bench/chat_memory.py (N taskmaster rows, gpt2 + chatml, C=4096, `--overflow
split`, fresh cache and output), in fresh processes alternating trim on / off (off: the
pipeline's `trim` replaced by a no-op, nothing else changed). Prints wall and CPU seconds
(getrusage: every thread) of the `pack` call, the trims' own time and peak RSS.

    python bench/trim_cost.py --rows 10000 --pairs 3
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
CHILD = r"""
import json, os, resource, sys, time
import packtool.tokenize.pipeline as pl
from packtool import heap
spent = []
def timed():
    t = time.perf_counter(); heap.trim(); spent.append(time.perf_counter() - t)
pl.trim = timed if sys.argv[4] == "on" else (lambda: None)
import packtool.packing as pk
from packtool import Alignment, PackingConfig, TokenizeConfig
data, tok, work = sys.argv[1:4]
r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
pk.pack([data], Alignment(capacity=4096), PackingConfig(overflow="split"),
        TokenizeConfig(tokenizer=tok, chat_template="chatml"),
        output=os.path.join(work, "out"), cache_dir=os.path.join(work, "cache"))
r1 = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall_s": time.perf_counter() - t0, "cpu_s": r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime,
                  "trims": len(spent), "trim_s": sum(spent), "peak_rss_mib": r1.ru_maxrss // 1024}))
"""


def main() -> None:
    from chat_memory import make_data
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10000)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--src", default=ROOT)
    a = ap.parse_args()
    tok = os.path.join(ROOT, "fixtures", "tokenizers", "gpt2", "tokenizer.json")
    base = tempfile.mkdtemp(prefix="trim-cost-")
    try:
        data = os.path.join(base, "chat.jsonl")
        make_data(data, a.rows)
        runs = {"on": [], "off": []}
        for i in range(a.pairs):
            for mode in (("on", "off") if i % 2 == 0 else ("off", "on")):
                work = os.path.join(base, "w")
                shutil.rmtree(work, ignore_errors=True)
                load = os.getloadavg()[0]
                p = subprocess.run([sys.executable, "-c", CHILD, data, tok, work, mode], capture_output=True, text=True,
                                   env=dict(os.environ, PYTHONPATH=a.src))
                if p.returncode:
                    sys.exit(p.stderr[-3000:])
                r = {"mode": mode, "rows": a.rows, "load_1min": round(load, 1), **json.loads(p.stdout.strip().splitlines()[-1])}
                runs[mode].append(r)
                print(json.dumps(r), flush=True)
        med = {m: {k: statistics.median(r[k] for r in rs) for k in ("wall_s", "cpu_s", "trim_s", "peak_rss_mib")}
               for m, rs in runs.items()}
        print(json.dumps({"median": med, "cpu_on_over_off": med["on"]["cpu_s"] / med["off"]["cpu_s"] - 1,
                          "wall_on_over_off": med["on"]["wall_s"] / med["off"]["wall_s"] - 1,
                          "load_after": round(os.getloadavg()[0], 1)}))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
