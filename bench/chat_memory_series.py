"""Memory over time while one process tokenizes (or packs) N chat rows (issue 23 class 8).

Every 0.1 s: rows written so far, VmRSS and RssAnon, glibc's mallinfo2 over all arenas (bytes
in use, free but kept, system memory), Python's allocated blocks and Arrow's pool (current and
peak). One JSON line per sample to OUT; a summary line on stdout.

    PYTHONPATH=TREE python bench/chat_memory_series.py DATA.jsonl TOKENIZER.json WORK OUT.jsonl [tok|pack]

(DATA: e.g. bench/chat_memory.py's make_data; raw series in bench/results/chat_memory/series/.)
"""
from __future__ import annotations

import ctypes
import json
import os
import resource
import sys
import threading
import time


class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]


def status() -> dict:
    with open("/proc/self/status") as f:
        return {line.split(":")[0]: int(line.split()[1]) // 1024 for line in f
                if line.startswith(("VmRSS", "RssAnon", "RssFile"))}


def main() -> None:
    data, tok, work, out = sys.argv[1:5]
    stage = sys.argv[5] if len(sys.argv) > 5 else "tok"
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    import pyarrow as pa

    import packtool.packing as pk
    from packtool import Alignment, PackingConfig, TokenizeConfig
    from packtool.tokenize import sink
    rows, series, stop = [0], [], threading.Event()
    add = sink.CacheSink.add

    def counted(self, ids, mask, lens, *a, **k):
        rows[0] += len(lens)
        return add(self, ids, mask, lens, *a, **k)

    def sample() -> None:
        t0 = time.time()
        while not stop.is_set():
            s, m = status(), libc.mallinfo2()
            series.append({"t": round(time.time() - t0, 2), "rows": rows[0], "rss": s["VmRSS"], "anon": s["RssAnon"],
                           "heap_used": m.uordblks >> 20, "heap_free": m.fordblks >> 20, "sbrk": m.arena >> 20,
                           "mmap": m.hblkhd >> 20, "pyblocks": sys.getallocatedblocks(),
                           "arrow": pa.total_allocated_bytes() >> 20,
                           "arrow_max": pa.default_memory_pool().max_memory() >> 20})
            time.sleep(0.1)

    sink.CacheSink.add = counted
    threading.Thread(target=sample, daemon=True).start()
    cfg = TokenizeConfig(tokenizer=tok, chat_template="chatml")
    if stage == "tok":
        pk.tokenize_to_cache([data], cfg, cache_dir=os.path.join(work, "cache"), progress=False)
    else:
        pk.pack([data], Alignment(capacity=4096), PackingConfig(overflow="split"), cfg,
                output=os.path.join(work, "out"), cache_dir=os.path.join(work, "cache"))
    time.sleep(0.3)
    stop.set()
    with open(out, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in series)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"rows": rows[0], "cpu_s": round(ru.ru_utime + ru.ru_stime, 1),
                      "max_heap_used": max(r["heap_used"] for r in series),
                      "max_sbrk": max(r["sbrk"] for r in series), "max_rss": max(r["rss"] for r in series),
                      "max_anon": max(r["anon"] for r in series), "ru_maxrss": ru.ru_maxrss >> 10}))


if __name__ == "__main__":
    main()
