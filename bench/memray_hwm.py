"""Allocations live at a memray capture's high-water mark, grouped by a readable stack key.

    PYTHONPATH=/tmp/memray python bench/memray_hwm.py X.bin [--depth 6] [--top 40]

memray's `tree` is interactive; this prints the same high-water-mark breakdown as text: for
each stack (Python frames, and with --native captures the native frames between them), the
bytes and blocks still allocated at the peak, largest first, plus a per-module total of the
innermost frame of interest (packtool, pyarrow, numpy, tokenizers, ...)."""
from __future__ import annotations

import argparse
import re
from collections import defaultdict

from memray import FileReader


# allocator internals: skipped in the native part of a key (their callers say who allocated)
_ALLOC = re.compile(r"je_|jemalloc|pac_alloc|arena_|base_block|_PyObject_|pymalloc|new_arena|allocate_from|"
                    r"_PyMem|PyMem_|operator new|malloc|calloc|realloc|mmap|ecache|extent|large_|tcache|"
                    r"_PyBytes_FromSize|PyBytes_FromString|PyUnicode_New|alloc::|__rust_|_RNvNtCs.*alloc")


def frame_text(f) -> str:
    fn, file, line = f[:3]
    return f"{fn} {file.rsplit('/', 2)[-2:] and '/'.join(file.rsplit('/', 2)[-2:])}:{line}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("capture")
    ap.add_argument("--depth", type=int, default=6, help="Python frames")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--native", type=int, default=3, help="native frames (allocator internals skipped)")
    a = ap.parse_args()
    r = FileReader(a.capture)
    md = r.metadata
    print(f"# {a.capture}: peak {md.peak_memory / 2**20:.1f} MiB tracked, "
          f"{md.total_allocations} allocations, command {md.command_line[:160]}")
    by_stack, by_mod = defaultdict(lambda: [0, 0]), defaultdict(lambda: [0, 0])
    total = 0
    for rec in r.get_high_watermark_allocation_records(merge_threads=True):
        try:
            st = rec.hybrid_stack_trace(max_stacks=60) if md.has_native_traces else rec.stack_trace(max_stacks=60)
        except Exception:  # noqa: BLE001 - a frame memray cannot resolve
            st = rec.stack_trace(max_stacks=60)
        py = rec.stack_trace(max_stacks=60)
        nat = [f for f in st if not _ALLOC.search(f[0])]
        key = (" <- ".join(frame_text(f) for f in nat[: a.native]) + " || "
               + " <- ".join(frame_text(f) for f in py[: a.depth])) or "<no stack>"
        by_stack[key][0] += rec.size
        by_stack[key][1] += rec.n_allocations
        mod = "<other>"
        for f in st:
            file = f[1]
            for m in ("packtool/", "pyarrow", "numpy", "tokenizers", "numba", "llvmlite", "xxhash",
                      "importlib", "memray", "libpython", "python3"):
                if m in file:
                    mod = m.rstrip("/")
                    break
            else:
                continue
            break
        by_mod[mod][0] += rec.size
        by_mod[mod][1] += rec.n_allocations
        total += rec.size
    print(f"# live at the high-water mark: {total / 2**20:.1f} MiB")
    print("## by first recognised frame (innermost out)")
    for m, (b, n) in sorted(by_mod.items(), key=lambda kv: -kv[1][0]):
        print(f"{b / 2**20:9.2f} MiB {n:9d} blocks  {m}")
    print(f"## top {a.top} stacks (innermost first, {a.depth} frames)")
    for k, (b, n) in sorted(by_stack.items(), key=lambda kv: -kv[1][0])[: a.top]:
        print(f"{b / 2**20:9.2f} MiB {n:9d} blocks  {k}")


if __name__ == "__main__":
    main()
