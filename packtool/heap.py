"""The C heap. glibc keeps what a program frees in its arenas (one per thread that allocated,
up to 8 per core) and hands pages back to the system only from an arena's top. `trim` returns
every whole free page of every arena (`malloc_trim(0)`): the writers call it between phases
(slabs.writer.release_memory). `bound_heap` fixes glibc's mmap threshold while tokenizing
(below). Both are no-ops where the C library is not glibc (musl, macOS)."""
from __future__ import annotations

import ctypes
import ctypes.util
import os

_M_MMAP_THRESHOLD = -3  # glibc's malloc.h
# Blocks of at least this many bytes get pages of their own (mmap), returned when freed.
MMAP_THRESHOLD = 256 << 10


def _libc():
    try:
        os.confstr("CS_GNU_LIBC_VERSION")  # raises (or gives None) off glibc
    except (ValueError, OSError, AttributeError):
        return None
    if not os.confstr("CS_GNU_LIBC_VERSION"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or None)
    except OSError:
        return None


_LIBC = _libc()
_bound = False


def trim() -> None:
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def bound_heap() -> None:
    """Fix glibc's mmap threshold at MMAP_THRESHOLD, once per process. By default the threshold
    follows the largest block freed (up to 32 MiB): after the first 8 MB JSON block or Python
    bytes object is freed, every later one is carved from an arena, and the arenas keep the
    high-water mark of those transients met with the encode chunks' Encodings. A raw chat pack's
    peak RSS then grew with the rows (each JSON block one more chance of a higher coincidence:
    issue 23 class 8, BENCHMARKS.md "Raw chat pack: peak RSS"). With the threshold fixed, large
    transients map and unmap pages of their own and the arenas hold only small blocks. Set while
    tokenizing starts (before the encode threads exist) and left for the rest of the process."""
    global _bound
    if _LIBC is not None and not _bound:
        _LIBC.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        _bound = True
