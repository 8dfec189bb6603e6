"""Peak RSS of a raw chat pack by stage, as the row count grows (issue 23 class 8).

Each run is a fresh process that packs N chat rows (the taskmaster fixture's 200
conversations, repeated with fresh ids) from JSON Lines with gpt2 + chatml, C=4096,
`--overflow split`, a fresh cache and output; a thread samples VmRSS every 20 ms and files the
peak under the stage running then (imports, tokenize, plan+write). Runs alternate over N.

    python bench/chat_memory.py --rows 10000,100000 --repeat 2 [--trace] [--env MALLOC_ARENA_MAX=2] [--src TREE]

VmRSS is what is compared; its anonymous and file-backed parts at each peak are printed too
(mapped cache files count in VmRSS but are the page cache's).

`--data real` packs DISTINCT conversations instead: the 3,710 Taskmaster-4 dialogs of
../shared/data (its MANIFEST), cycled with fresh ids to reach N rows (a fixture of 200 repeated
conversations hides whatever is kept per distinct text). The parent writes the input; the
pack is a fresh `python -P -m packtool pack` child whose peak RSS is its ru_maxrss (wait4):

    python bench/chat_memory.py --data real --tok mistral --rows 2000,20000,100000 --log OUT.jsonl
    python bench/chat_memory.py --data real --tok gpt2 --rows 2000,20000,100000
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
import time

from runlog import emit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "fixtures")
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "data")
REAL_CHATS = os.path.join(SHARED, "taskmaster4", "tm4_coffee_dialogs_chat.jsonl.gz")
# tokenizer and the chat template packed with it (--tok)
TOKS = {"gpt2": ("gpt2", "chatml"), "mistral": ("mistral-7b-v0.1", "mistral")}
CHILD = r"""
import json, os, sys, threading, time
stage, peaks = ["imports"], {}
anon = {}
def rss():
    with open("/proc/self/status") as f:
        got = {l.split(":")[0]: int(l.split()[1]) // 1024 for l in f if l.startswith(("VmRSS", "RssAnon", "RssFile"))}
    return got
heap = {}
def heap_now():
    # at a new peak: glibc's arenas (in use, free kept) and Arrow's pool, MiB
    out = {}
    try:
        import ctypes
        class MI(ctypes.Structure):
            _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                      "fsmblks", "uordblks", "fordblks", "keepcost")]
        libc = ctypes.CDLL(None)
        libc.mallinfo2.restype = MI
        m = libc.mallinfo2()
        out = {"glibc_used": m.uordblks >> 20, "glibc_free": m.fordblks >> 20, "glibc_mmap": m.hblkhd >> 20}
        pa = sys.modules.get("pyarrow")
        if pa is not None and hasattr(pa, "default_memory_pool"):
            out["arrow_alloc"] = pa.default_memory_pool().bytes_allocated() >> 20
    except Exception:  # a module half imported: left out of this sample
        pass
    return out
SMAPS = os.environ.get("SMAPS_DIR")  # a copy of /proc/self/smaps at each stage's peak
def sample():
    while True:
        got = rss()
        if got["VmRSS"] > peaks.get(stage[0], 0):
            peaks[stage[0]] = got["VmRSS"]
            anon[stage[0]] = (got["RssAnon"], got["RssFile"])
            heap[stage[0]] = heap_now()
            if SMAPS:
                with open("/proc/self/smaps") as f, open(os.path.join(SMAPS, stage[0] + ".smaps"), "w") as g:
                    g.write(f.read())
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
data, tokenizer, work, template = sys.argv[1:5]
if os.environ.get("HEAP_SLACK_MIB"):  # an experiment: another trim trigger (packtool.heap.HeapBound)
    import packtool.tokenize.pipeline as pl
    pl._HEAP_SLACK = int(os.environ["HEAP_SLACK_MIB"]) << 20
if os.environ.get("STAGES_CLI"):  # the command itself, as a user runs it: peaks said as it leaves
    import resource
    def report(code, _exit=os._exit):
        stage[0] = "end"
        ru = resource.getrusage(resource.RUSAGE_SELF)
        sys.stdout.write(json.dumps({"peaks_mib": peaks, "anon_file_at_peak_mib": anon, "heap_at_peak_mib": heap,
                                     "max_rss_mib": round(ru.ru_maxrss / 1024, 1), "exit": code, "minflt": ru.ru_minflt,
                                     "cpu_s": round(ru.ru_utime + ru.ru_stime, 1)}) + "\n")
        sys.stdout.flush()
        _exit(code)
    os._exit = report
    sys.argv = ["packtool", "pack", data, "--tokenizer", tokenizer, "--chat-template", template, "-C", "4096",
                "--overflow", "split", "--cache-dir", os.path.join(work, "cache"), "-o", os.path.join(work, "out"),
                "--no-progress"]
    from packtool.cli import main
    main()
if os.environ.get("JE_DECAY_MS"):  # an experiment: Arrow's jemalloc decay for the whole run
    import pyarrow
    pyarrow.jemalloc_set_decay_ms(int(os.environ["JE_DECAY_MS"]))
t0 = time.perf_counter()
pk.pack([data], Alignment(capacity=4096), PackingConfig(overflow="split"),
        TokenizeConfig(tokenizer=tokenizer, chat_template=template),
        output=os.path.join(work, "out"), cache_dir=os.path.join(work, "cache"))
wall = time.perf_counter() - t0
stage[0] = "end"
time.sleep(0.05)
import resource
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"peaks_mib": peaks, "anon_file_at_peak_mib": anon, "heap_at_peak_mib": heap,
                  "max_rss_mib": round(ru.ru_maxrss / 1024, 1), "wall_s": round(wall, 1),
                  "cpu_s": round(ru.ru_utime + ru.ru_stime, 1)}))
"""


def make_data(path: str, n: int, source: str | None = None) -> None:
    source = source or os.path.join(FIX, "data", "taskmaster4_chat_200.jsonl.gz")
    rows = [json.loads(line) for line in gzip.open(source, "rt")]
    with open(path, "w") as f:
        for i in range(n):
            r = dict(rows[i % len(rows)])
            r["id"] = f"r{i}"
            f.write(json.dumps(r) + "\n")


def run_command(data: str, tok: str, template: str, work: str, env: dict, extra: tuple[str, ...] = ()) -> dict:
    """One `python -m packtool pack` in a fresh child: its peak RSS (ru_maxrss) and CPU."""
    cmd = [sys.executable, "-P", "-m", "packtool", "pack", data, "--tokenizer", tok, "--chat-template",
           template, "-C", "4096", "--overflow", "split", "--cache-dir", os.path.join(work, "cache"),
           "-o", os.path.join(work, "out"), "--no-progress", *extra]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        sys.exit(err.decode(errors="replace"))
    return {"max_rss_mib": round(ru.ru_maxrss / 1024, 1), "cpu_s": round(ru.ru_utime + ru.ru_stime, 1),
            "minflt": ru.ru_minflt, "cmd": " ".join(["python -P -m packtool pack DATA"] + cmd[6:10] + list(extra))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="10000,100000")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--trace", action="store_true", help="tracemalloc's top sites after tokenizing (slow)")
    ap.add_argument("--src", default=ROOT, help="packtool source tree to measure")
    ap.add_argument("--env", action="append", default=[], metavar="K=V", help="set in the child (e.g. MALLOC_ARENA_MAX=2)")
    ap.add_argument("--data", choices=("fixture", "real"), default="fixture",
                    help="real: distinct Taskmaster dialogs from ../shared/data, packed by the command")
    ap.add_argument("--tok", choices=sorted(TOKS), default="gpt2", help="tokenizer (and its template) for --data real")
    ap.add_argument("--log", help="append each run's JSON line here")
    ap.add_argument("--pack-args", action="append", default=[], metavar="'FLAGS'",
                    help="--data real: a variant of the command's flags (e.g. '--shard-tokens 4194304'); "
                         "each is run beside the plain command, alternating")
    ap.add_argument("--smaps", metavar="DIR", help="with --stages: save /proc/self/smaps at each stage's peak "
                    "to DIR/ROWS-RUN/STAGE.smaps (bench/smaps_classes.py reads them)")
    ap.add_argument("--cli", action="store_true",
                    help="with --stages: sample `packtool pack` (the command, flags as without --stages) instead "
                         "of the library call")
    ap.add_argument("--stages", action="store_true",
                    help="with --data real: the library call in a sampled child (peak by stage, anon/file, "
                         "glibc and Arrow at each peak) instead of the command's ru_maxrss")
    a = ap.parse_args()
    tok = os.path.join(FIX, "tokenizers", "gpt2", "tokenizer.json")
    template = "chatml"
    if a.data == "real":
        name, template = TOKS[a.tok]
        tok = os.path.join(SHARED, "tokenizers", name, "tokenizer.json")
    base = tempfile.mkdtemp(prefix="chat-memory-")
    try:
        ns = [int(x) for x in a.rows.split(",")]
        for n in ns:
            make_data(os.path.join(base, f"chat_{n}.jsonl"), n, REAL_CHATS if a.data == "real" else None)
        for rep in range(a.repeat):
            for n in ns:
                work = os.path.join(base, f"w{n}")
                shutil.rmtree(work, ignore_errors=True)
                env = dict(os.environ, PYTHONPATH=a.src, **({"TRACE": "1"} if a.trace else {}))
                env.pop("ARROW_DEFAULT_MEMORY_POOL", None)
                env.update(kv.split("=", 1) for kv in a.env)
                if a.cli:
                    env["STAGES_CLI"] = "1"
                if a.smaps:
                    env["SMAPS_DIR"] = os.path.join(os.path.abspath(a.smaps), f"{n}-{rep}")
                    os.makedirs(env["SMAPS_DIR"], exist_ok=True)
                load = os.getloadavg()[0]
                if a.data == "real" and not a.stages:
                    for extra in ["", *a.pack_args]:
                        load = os.getloadavg()[0]
                        r = run_command(os.path.join(base, f"chat_{n}.jsonl"), tok, template, work, env,
                                        tuple(extra.split()))
                        emit({"rows": n, "run": rep, "data": "real", "tok": a.tok, "template": template,
                              "env": a.env, "pack_args": extra, "src": a.src, "load_1min": round(load, 1),
                              "load_after": round(os.getloadavg()[0], 1),
                              "utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), **r}, a.log)
                        shutil.rmtree(work, ignore_errors=True)
                    continue
                # -P: `-c` would put the working directory (a checkout) ahead of --src on sys.path
                p = subprocess.run([sys.executable, "-P", "-c", CHILD, os.path.join(base, f"chat_{n}.jsonl"), tok, work,
                                    template],
                                   env=env, capture_output=True, text=True)
                if p.returncode:
                    sys.exit(p.stderr)
                if a.trace:
                    print(p.stderr, file=sys.stderr)
                r = json.loads(p.stdout.strip().splitlines()[-1])
                emit({"rows": n, "run": rep, "data": a.data, "cli": a.cli, "tok": a.tok if a.data == "real" else "gpt2",
                      "template": template, "env": a.env, "src": a.src, "load_1min": round(load, 1),
                      "utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), **r}, a.log)
                shutil.rmtree(work, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
