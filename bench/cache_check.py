"""What trusting the tokenized cache costs: the check on reuse against a warm re-pack.

On every run `pack` hashes each input's content (xxh3-128: the cache key, so an input edited
in place with the same size and mtime is a new key) and, when the key's cache exists,
re-hashes every file the cache holds (Parquet parts, flat/tokens.i32, flat/offsets.npy)
against cache.json's record before reusing it (packtool/tokenize/cache.py `cache_problem`).
This compares that check with the warm re-pack it guards.

Data: the 10x real set of bench/engines.py (every record of ../shared/data, 12 files, copied
10 times into their own folders), mistral-7b-v0.1 tokenizer + mistral template, tp=4 cp=2 sp
blockwise FP8, C=8192, bfd --overflow split. One cold `pack` builds the cache (not timed);
then --runs rounds, each in fresh processes, alternating:
  re-pack  `python -m packtool.cli pack ... --overwrite` (cache reused: check + plan + write)
  check    a fresh process timing the two hashing steps alone (after its imports and the
           tokenizer load, which the re-pack pays anyway): input digests, cache re-hash.
Wall seconds and CPU seconds (user+sys of the child) are reported; the goal is a check
under 5% of the warm re-pack. Files are in the page cache (warm), as on a re-pack.

    python bench/cache_check.py [--runs 5] [--work /tmp/packtool-bench-cache-check]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from engines import DATA, prepare, replicate  # noqa: E402

FLAGS = ["--tokenizer", os.path.join(DATA, "tokenizers/mistral-7b-v0.1"), "--chat-template", "mistral",
         "--prompt-field", "question", "--response-field", "answer", "--tp", "4", "--cp", "2",
         "--sp", "--fp8", "blockwise", "-C", "8192", "-a", "bfd", "--overflow", "split"]

CHECK = r"""
import json, os, sys, time
from packtool.tokenize.config import TokenizeConfig
from packtool.tokenize.pipeline import _fingerprint, _setup, input_digests
from packtool.tokenize.cache import cache_problem
inputs, root = json.loads(sys.argv[1]), sys.argv[2]
cfg = TokenizeConfig(tokenizer=sys.argv[3], chat_template="mistral", prompt_field="question",
                     response_field="answer")
files, shapes, loaded, template = _setup(inputs, cfg)
c0, t0 = time.process_time(), time.perf_counter()
digests = input_digests(files)
t1 = time.perf_counter()
fp = _fingerprint(files, digests, cfg, loaded.info, shapes)
final = os.path.join(root, fp[:32])
problem = cache_problem(final, fp)
t2, c2 = time.perf_counter(), time.process_time()
assert problem is None, problem
meta = json.load(open(os.path.join(final, "cache.json")))
print(json.dumps({"inputs_s": t1 - t0, "cache_s": t2 - t1, "check_s": t2 - t0, "cpu_s": c2 - c0,
                  "input_bytes": sum(os.path.getsize(f.path) for f in files),
                  "cache_bytes": sum(r["bytes"] for r in meta["checksums"].values()),
                  "tokens": meta["num_tokens"]}))
"""


def _child(cmd: list[str]) -> tuple[float, float, str]:
    """(wall s, child CPU s, stdout) of one fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode:
        raise SystemExit(f"{' '.join(cmd[:4])}... failed ({res.returncode}): {res.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, res.stdout


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--work", default="/tmp/packtool-bench-cache-check")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    data = os.path.join(args.work, "data")
    os.makedirs(data, exist_ok=True)
    inputs = replicate(prepare(data), args.copies, data)
    cache, out = os.path.join(args.work, "cache"), os.path.join(args.work, "out")
    pack = [sys.executable, "-m", "packtool.cli", "pack", *inputs, *FLAGS, "--cache-dir", cache,
            "-o", out, "--overwrite", "--no-progress", "--json"]
    check = [sys.executable, "-c", CHECK, json.dumps(inputs), cache,
             os.path.join(DATA, "tokenizers/mistral-7b-v0.1")]
    t0 = time.perf_counter()
    _child(pack)  # builds the cache (cold) unless it is there
    print(f"first pack: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    rows = []
    for r in range(args.runs):
        load = os.getloadavg()[0]
        pw, pc, pout = _child(pack)
        cw, cc, cout = _child(check)
        c = json.loads(cout)
        assert json.loads(pout)["tokenize_seconds"] < pw
        rows.append({"load": load, "repack_s": pw, "repack_cpu_s": pc, **c})
        print(f"run {r}: load {load:.1f} · re-pack {pw:.2f} s ({pc:.2f} CPU-s) · check "
              f"{c['check_s']:.3f} s (inputs {c['inputs_s']:.3f}, cache {c['cache_s']:.3f}; "
              f"{c['cpu_s']:.3f} CPU-s)", file=sys.stderr)
    med = {k: statistics.median(r[k] for r in rows) for k in
           ("repack_s", "repack_cpu_s", "check_s", "inputs_s", "cache_s", "cpu_s")}
    first = rows[0]
    gb = (first["input_bytes"] + first["cache_bytes"]) / 1e9
    print(f"\n`python bench/cache_check.py --runs {args.runs}` — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"1-min load {min(r['load'] for r in rows):.1f}-{max(r['load'] for r in rows):.1f}\n")
    print(f"10x real set: {first['tokens']:,} tokens; hashed per run: inputs "
          f"{first['input_bytes'] / 1e6:,.0f} MB + cache {first['cache_bytes'] / 1e6:,.0f} MB "
          f"= {gb:.2f} GB ({gb / med['check_s']:.1f} GB/s)\n")
    print("| run | 1-min load | warm re-pack s | re-pack CPU-s | check s (inputs + cache) | check CPU-s | check / re-pack (wall) | (CPU) |")
    print("|---|---|---|---|---|---|---|---|")
    for i, r in enumerate(rows):
        print(f"| {i} | {r['load']:.1f} | {r['repack_s']:.2f} | {r['repack_cpu_s']:.2f} | "
              f"{r['check_s']:.3f} ({r['inputs_s']:.3f} + {r['cache_s']:.3f}) | {r['cpu_s']:.3f} | "
              f"{100 * r['check_s'] / r['repack_s']:.1f}% | {100 * r['cpu_s'] / r['repack_cpu_s']:.1f}% |")
    print(f"| median | | {med['repack_s']:.2f} | {med['repack_cpu_s']:.2f} | {med['check_s']:.3f} "
          f"({med['inputs_s']:.3f} + {med['cache_s']:.3f}) | {med['cpu_s']:.3f} | "
          f"**{100 * med['check_s'] / med['repack_s']:.1f}%** | **{100 * med['cpu_s'] / med['repack_cpu_s']:.1f}%** |")


if __name__ == "__main__":
    main()
