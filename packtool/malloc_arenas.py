"""glibc's malloc arenas under a limit on the process's address space (S47A-16).

glibc gives a thread that meets another in malloc an arena of its own, reserving 64 MiB of
address space for each (up to 8 per core), whatever it holds. A pack's threads (the tokenizer's
pool, one per core; packtool's readers and encoders; Arrow's) reserved ~690 MiB so while ~300 MiB
were resident: under `ulimit -v 1000000` (or `ulimit -d`) a 20 MB JSON Lines pack then died in
the tokenizer's native code, where no handler runs: a Rust allocation abort (exit 134), a rayon
pool panic with a traceback, or "can't start new thread" (exit 3), varying run to run. Where such
a limit is set the arenas are capped, so that reservations take at most an eighth of it (never
fewer than 2: one is all threads queueing on one lock). Without a limit nothing changes: the
address space is not what runs out there. MALLOC_ARENA_MAX, when set, is the user's and wins.
"""
from __future__ import annotations

import os
import resource

ARENA = 64 << 20  # what glibc reserves per arena on 64-bit


def arenas_for(limit: int, cores: int) -> int:
    """How many arenas a process limited to `limit` bytes of address space (or data) may have."""
    return max(2, min(8 * max(cores, 1), limit // (8 * ARENA)))


def cap_arenas() -> int | None:
    """Cap glibc's arenas where the address space or data size is limited; the cap, or None where
    nothing was done (no limit, MALLOC_ARENA_MAX given, not glibc). Call before threads start:
    arenas made before stay."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return None
    limits = [resource.getrlimit(r)[0] for r in (resource.RLIMIT_AS, resource.RLIMIT_DATA)]
    limits = [x for x in limits if x != resource.RLIM_INFINITY]
    if not limits:
        return None
    import ctypes  # only under a limit: the import costs
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no arenas to cap)
        return None
    # glibc's own bound is 8 arenas per online CPU of the host (its get_nprocs), not the CPUs
    # this process may run on (workers.cores)
    n = arenas_for(min(limits), os.sysconf("SC_NPROCESSORS_ONLN") or 1)
    return n if mallopt(-8, n) == 1 else None  # -8: M_ARENA_MAX; mallopt returns 1 on success
