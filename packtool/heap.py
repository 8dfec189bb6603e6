"""The C heap. glibc keeps what a program frees in its arenas (one per thread that allocated,
up to 8 per core) and hands pages back to the system only from an arena's top. `trim` returns
every whole free page of every arena (`malloc_trim(0)`): the writers call it between phases
(slabs.writer.release_memory). While tokenizing, `bound_heap` fixes the mmap threshold and a
`HeapBound` trims when the arenas hold much more than they did (issue 23 class 8). All are
no-ops where the C library is not glibc (musl, macOS: other allocators, other rules)."""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from contextlib import contextmanager

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
# Blocks of at least this many bytes get pages of their own (mmap), returned when freed: the
# JSON blocks (8 MB), their copies and decoded text. At 256 KiB every encode chunk's id arrays
# were mapped and unmapped too, and a 2k-row chat tokenize took 4-16% more CPU (4 pairs;
# munmap in a process of many threads); at 4 MiB a handful of blocks per 8 MB of input map.
MMAP_THRESHOLD = 4 << 20
# A fixed mmap threshold also fixes the trim threshold (glibc's own rule sets it to twice the
# largest mapped block freed): an arena's top is returned only past this much. malloc_trim
# (`trim`, HeapBound) never returns a thread arena's top, so each encode/writer thread's arena
# kept up to this much resident: at 8 MiB their tops held 12-20 MiB after tokenizing (more
# the longer the run) against 3-4 MiB at 1 MiB (issue 23 class 8).
TRIM_THRESHOLD = 1 << 20


def _libc():
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return None
        return ctypes.CDLL(ctypes.util.find_library("c") or None)
    except (ValueError, OSError, AttributeError):  # no such name off glibc; no confstr off POSIX
        return None


_LIBC = _libc()
_PAGE = os.sysconf("SC_PAGE_SIZE") if _LIBC is not None else 4096
_bound = False


def trim() -> None:
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def bound_heap() -> None:
    """Fix glibc's mmap threshold at MMAP_THRESHOLD, once per process. By default the threshold
    follows the largest block freed (up to 32 MiB): once the first 8 MB JSON block (or its copy,
    or its decoded text) is freed, every later one is carved from an arena, whose high-water mark
    stays resident. Large blocks then map and unmap pages of their own: a few page faults per
    MB, against the seconds of encoding that MB. Left so for the rest of the process (glibc
    cannot go back to following)."""
    global _bound
    if _LIBC is not None and not _bound:
        _LIBC.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        _LIBC.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
        _bound = True


# glibc's own ceiling for its moving threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX), and the
# trim threshold its rule pairs with it: where a long run's threshold ends up without us.
_FOLLOWED_MMAP, _FOLLOWED_TRIM = 32 << 20, 64 << 20


def unbound_heap() -> None:
    """Undo `bound_heap` once the encoding is over. Its fixed 4 MiB threshold suits the
    tokenizer's 8 MB blocks, but the ingest of pre-tokenized rows and the plan + write after it
    allocate and free arrays of tens of MB per batch: each would map fresh pages and fault them
    in (a 1M pre-tokenized pack's ingest took ~10% more CPU). glibc cannot return to its moving
    threshold, so this sets the ceiling that threshold reaches on its own."""
    global _bound
    if _LIBC is not None and _bound:
        _LIBC.mallopt(_M_MMAP_THRESHOLD, _FOLLOWED_MMAP)
        _LIBC.mallopt(_M_TRIM_THRESHOLD, _FOLLOWED_TRIM)
        _bound = False


# How far anonymous memory may rise above its low point while shards are written before a
# writer trims (HeapBound). A shard's writer returned its arena's free pages only at the
# shard's end, so the longer the shards (more rows), the more each arena kept between: a
# 300k-row chat pack's thread arenas rose 39 -> 57 MiB during the write, a 20k one's stayed
# at 37 (issue 23 class 8).
WRITE_SLACK = 16 << 20


@contextmanager
def writing_heap():
    """While shards are written: an arena's top is returned past TRIM_THRESHOLD, as while
    encoding (writer threads allocate in arenas of their own, whose tops malloc_trim never
    returns). The mmap threshold is `unbound_heap`'s, so a plan's large arrays are unaffected;
    the trim threshold goes back to that pairing after."""
    if _LIBC is None:
        yield
        return
    _LIBC.mallopt(_M_MMAP_THRESHOLD, _FOLLOWED_MMAP if not _bound else MMAP_THRESHOLD)
    _LIBC.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    try:
        yield
    finally:
        _LIBC.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD if _bound else _FOLLOWED_TRIM)


def anon_bytes() -> int:
    """Resident anonymous memory of this process (resident less file-backed pages)."""
    with open("/proc/self/statm", "rb") as f:
        fields = f.read().split()
    return (int(fields[1]) - int(fields[2])) * _PAGE


class HeapBound:
    """Trim the arenas when the process's anonymous memory has risen `slack` bytes above its
    low point since the last trim: what the arenas keep beyond what is in use stays under
    `slack`, whatever the run's length. `check` is cheap (one read of /proc/self/statm) and
    safe from any thread; one trims at a time, the others go on."""

    def __init__(self, slack: int) -> None:
        self.slack, self.low, self.trims = slack, None, 0
        self._lock = threading.Lock()

    def check(self) -> None:
        if _LIBC is None or not self._lock.acquire(blocking=False):
            return
        try:
            now = anon_bytes()
            if self.low is None or now < self.low:
                self.low = now
            elif now - self.low > self.slack:
                trim()
                self.trims += 1
                self.low = anon_bytes()
        finally:
            self._lock.release()
