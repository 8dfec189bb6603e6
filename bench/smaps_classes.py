"""Resident memory of a /proc/PID/smaps copy, by kind of mapping (bench/chat_memory.py --smaps).

    python bench/smaps_classes.py A.smaps [B.smaps ...]

Kinds: `[heap]` (glibc's main arena, brk), glibc thread arenas (anonymous heaps inside 64 MiB
reservations aligned to 64 MiB: the writable part plus its `---p` rest), thread stacks
(`[stack]` and the anonymous mappings just above a 4 KiB guard page), other anonymous mappings
(jemalloc's extents for Arrow, pymalloc's 1 MiB arenas, glibc's large-block mmaps, numba),
file mappings by file. Where the kernel merged neighbours, a mapping is counted once, by
its first page."""
from __future__ import annotations

import sys
from collections import defaultdict

_HEAP_MAX = 64 << 20


def parse(path: str) -> list[dict]:
    out, cur = [], None
    for line in open(path):
        head = line.split()
        if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
            a, b = (int(x, 16) for x in head[0].split("-"))
            cur = {"start": a, "end": b, "perm": head[1], "name": head[5] if len(head) > 5 else "", "rss": 0,
                   "anon": 0}
            out.append(cur)
        elif head[0] == "Rss:":
            cur["rss"] = int(head[1]) << 10
        elif head[0] == "Anonymous:":
            cur["anon"] = int(head[1]) << 10
    return out


def classify(maps: list[dict]) -> dict[str, list[int]]:
    kinds = defaultdict(lambda: [0, 0])  # rss, mappings
    for i, m in enumerate(maps):
        size = m["end"] - m["start"]
        name = m["name"]
        if name.startswith("/"):
            kind = "file " + (name.rsplit("/", 1)[-1] if "site-packages" not in name and "lib" not in name
                              else ("libs" if ".so" in name else name.rsplit("/", 1)[-1]))
            if name.endswith(".i32") or "tokens" in name:
                kind = "file flat token store"
            elif ".so" in name:
                kind = "file shared libraries"
            else:
                kind = "file other"
        elif name == "[heap]":
            kind = "glibc main arena [heap]"
        elif name.startswith("[stack"):
            kind = "stacks"
        elif name:
            kind = name
        elif m["start"] % _HEAP_MAX == 0 and size <= _HEAP_MAX and (
                size == _HEAP_MAX or (i + 1 < len(maps) and maps[i + 1]["start"] == m["end"]
                                      and maps[i + 1]["perm"].startswith("---"))):
            kind = "glibc thread arenas"
        elif i > 0 and maps[i - 1]["perm"].startswith("---") and maps[i - 1]["end"] == m["start"] \
                and maps[i - 1]["end"] - maps[i - 1]["start"] == 4096:
            kind = "thread stacks (after a guard page)"
        else:
            kind = "other anonymous (jemalloc, pymalloc arenas, large mmaps, numba)"
        kinds[kind][0] += m["rss"]
        kinds[kind][1] += 1
    return kinds


def main() -> None:
    rows = {}
    for p in sys.argv[1:]:
        rows[p] = classify(parse(p))
    kinds = sorted({k for r in rows.values() for k in r}, key=lambda k: -max(r.get(k, [0])[0] for r in rows.values()))
    print("MiB resident | " + " | ".join(rows))
    for k in kinds:
        print(f"{k}: " + " | ".join(f"{r.get(k, [0, 0])[0] / 2**20:.1f} ({r.get(k, [0, 0])[1]})" for r in rows.values()))
    print("total: " + " | ".join(f"{sum(v[0] for v in r.values()) / 2**20:.1f}" for r in rows.values()))


if __name__ == "__main__":
    main()
