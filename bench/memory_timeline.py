"""Resident memory of a raw chat pack over time, by kind of mapping (issue 23 class 8).

    python bench/memory_timeline.py ROWS OUT.jsonl [SRC]

Packs ROWS distinct Taskmaster chats (bench/chat_memory.py --data real's input, gpt2 + chatml,
-C 4096, --overflow split) by the `packtool pack` command run in this process, and every second
(and at each new peak) writes one JSON line: the stage (tokenize, plan+write), VmRSS, the
resident MiB of glibc's main heap, its thread arenas, 2 MiB-aligned anonymous mappings
(jemalloc's), other anonymous mappings and files (bench/smaps_classes.py's kinds), glibc's
in-use / free / mapped bytes, Arrow's pool and Python's block count. Summarise with
`python bench/memory_timeline.py --summary OUT.jsonl` (medians and maxima per fifth of each
stage): a level that climbs through a stage is warm-up or a holder; one that is flat with rare
peaks is the tail of what is in flight."""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from smaps_classes import parse  # noqa: E402  (a bench script beside this one)

_HEAP = 64 << 20
KEYS = ("rss", "file", "heap", "tarena", "je2m", "anon_other", "g_used", "g_free", "g_mmap", "arrow", "blocks")


def classes() -> dict[str, float]:
    maps, k = parse("/proc/self/smaps"), {}
    for i, m in enumerate(maps):
        size, name = m["end"] - m["start"], m["name"]
        if name.startswith("/"):
            c = "file"
        elif name == "[heap]":
            c = "heap"
        elif name.startswith("["):
            c = "other"
        elif m["start"] % _HEAP == 0 and size <= _HEAP and (size == _HEAP or (
                i + 1 < len(maps) and maps[i + 1]["start"] == m["end"] and maps[i + 1]["perm"].startswith("---"))):
            c = "tarena"
        elif m["start"] % (2 << 20) == 0 and size % (2 << 20) == 0:
            c = "je2m"
        else:
            c = "anon_other"
        k[c] = k.get(c, 0) + m["rss"]
    return {a: round(b / 2**20, 1) for a, b in k.items()}


class _MallInfo(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                              "fsmblks", "uordblks", "fordblks", "keepcost")]


def run(rows: int, out_path: str) -> None:
    import chat_memory as cm
    work = tempfile.mkdtemp(prefix="memory-timeline-")
    data = os.path.join(work, "in.jsonl")
    cm.make_data(data, rows, cm.REAL_CHATS)
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _MallInfo
    stage, t0, out = ["imports"], time.time(), open(out_path, "w")

    def snap(kind: str, rss: int) -> None:
        m = libc.mallinfo2()
        pa = sys.modules.get("pyarrow")
        arrow = pa.default_memory_pool().bytes_allocated() >> 20 if pa is not None and hasattr(pa, "default_memory_pool") else -1
        out.write(json.dumps({"t": round(time.time() - t0, 2), "kind": kind, "stage": stage[0], "rss": rss, **classes(),
                              "g_used": m.uordblks >> 20, "g_free": m.fordblks >> 20, "g_mmap": m.hblkhd >> 20,
                              "arrow": arrow, "blocks": sys.getallocatedblocks() // 1000}) + "\n")
        out.flush()

    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20

    def sample() -> None:
        peak, last = 0, 0.0
        while True:
            r, now = rss(), time.time()
            if r > peak + 1:
                peak = r
                snap("peak", r)
            elif now - last > 1:
                last = now
                snap("tick", r)
            time.sleep(0.02)
    threading.Thread(target=sample, daemon=True).start()
    import packtool.packing as pk
    tok, pc = pk.tokenize_to_cache, pk.pack_cache
    pk.tokenize_to_cache = lambda *a, **k: (stage.__setitem__(0, "tokenize"), tok(*a, **k))[1]
    pk.pack_cache = lambda *a, **k: (stage.__setitem__(0, "plan+write"), pc(*a, **k))[1]

    def leave(code, _exit=os._exit):
        snap("end", rss())
        out.close()
        shutil.rmtree(work, ignore_errors=True)
        _exit(code)
    os._exit = leave  # the command leaves through os._exit
    sys.argv = ["packtool", "pack", data, "--tokenizer", os.path.join(cm.SHARED, "tokenizers", "gpt2", "tokenizer.json"),
                "--chat-template", "chatml", "-C", "4096", "--overflow", "split", "--cache-dir", os.path.join(work, "cache"),
                "-o", os.path.join(work, "out"), "--no-progress"]
    from packtool.cli import main
    main()


def summary(path: str) -> None:
    rows = [json.loads(line) for line in open(path)]
    print("==", path)
    for stage in ("tokenize", "plan+write"):
        r = [x for x in rows if x["stage"] == stage]
        if not r:
            continue
        pk = max(r, key=lambda x: x["rss"])
        print(f" {stage}: {len(r)} samples, peak at {pk['t']} s: " + " ".join(f"{k}={pk.get(k)}" for k in KEYS))
        for q in range(5):
            part = r[q * len(r) // 5:(q + 1) * len(r) // 5] or r[-1:]
            print(f"   fifth {q} median/max: " + " ".join(
                f"{k}={statistics.median([x.get(k, 0) for x in part]):.0f}/{max(x.get(k, 0) for x in part):.0f}" for k in KEYS))


if __name__ == "__main__":
    if sys.argv[1] == "--summary":
        for p in sys.argv[2:]:
            summary(p)
    else:
        if len(sys.argv) > 3:
            sys.path.insert(0, os.path.abspath(sys.argv[3]))
        run(int(sys.argv[1]), sys.argv[2])
