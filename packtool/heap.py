"""The C heap. glibc keeps what a program frees in its arenas (one per thread that allocated,
up to 8 per core) and hands pages back to the system only from an arena's top. `trim` returns
every whole free page of every arena (`malloc_trim(0)`): the writers call it between phases
(slabs.writer.release_memory). A no-op where the C library has none. Trimming every 2M tokens
while tokenizing was measured and did not flatten a raw chat pack's peak (BENCHMARKS.md, "Raw
chat pack: peak RSS"), so tokenizing does not."""
from __future__ import annotations

import ctypes
import ctypes.util


def _load_malloc_trim():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or None).malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to trim
        return None


_malloc_trim = _load_malloc_trim()


def trim() -> None:
    if _malloc_trim is not None:
        _malloc_trim(0)
