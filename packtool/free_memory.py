"""The memory this machine has available now: the one probe every bound asks (planning's
capacity and worker bounds, the HF mask, the tokenize stage's whole-file reads), so that
each refuses what cannot fit against the same figure, and a test stands in for one place; and
what a failed allocation while decoding a file is (`decode_out_of_memory`): out of memory, never
a damaged file."""
from __future__ import annotations

import os
import re
import resource


def available_bytes() -> int | None:
    """MemAvailable (Linux), else free physical pages; None when neither is known."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


# Arrow's allocator (Status::OutOfMemory: "realloc of size N failed"), and C++'s, as Parquet's
# decoder passes it on inside an OSError ("Couldn't deserialize thrift: std::bad_alloc")
_ALLOCATION = re.compile(r"\b(?:m|re|c)alloc of size (\d+) failed|std::bad_alloc|\bout of memory\b", re.I)
_LIMITS = ((resource.RLIMIT_AS, "the address-space limit (ulimit -v)"),
           (resource.RLIMIT_DATA, "the data-size limit (ulimit -d)"))


class DecodeOutOfMemory(MemoryError):
    """A file packtool reads that this process had no memory to decode: the file is not at
    fault, so never "corrupt" (the CLI's out-of-memory line, kind `resources`). `path` is the file
    (--json's path; the line names it already)."""

    def __init__(self, message: str, path: str | None = None):
        super().__init__(message)
        self.path = path


def decode_out_of_memory(e: BaseException, path: str, part: str | None = None, *, what: str = "the file",
                         less: str | None = None) -> MemoryError | None:
    """For an error caught decoding `path` (its `part`, e.g. `row group 3`): the out-of-memory
    error naming the file, what could not be allocated and the process's limit, when `e` is an
    allocation that failed (an Arrow MemoryError, or one Parquet's decoder wrapped); else None.
    `what` is not at fault, and `less` is how the caller's door reads less at once, where it has
    one ("read less at once" named no flag that does)."""
    text = " ".join(str(e).split())
    m = _ALLOCATION.search(text)
    if not (isinstance(e, MemoryError) or m):
        return None
    size = f"{int(m[1]) / 2**20:,.1f} MiB" if m and m[1] else "memory"
    limits = [f"{said} is {soft / 2**20:,.0f} MiB" for lim, said in _LIMITS
              if (soft := resource.getrlimit(lim)[0]) != resource.RLIM_INFINITY]
    under = f"; {', '.join(limits)}" if limits else ""
    where = f"{path} {part}" if part else f"{path}"
    more = f"raise the limit) or {less}" if less else "raise the limit, or run on a machine with more memory)"
    return DecodeOutOfMemory(f"{where}: out of memory decoding it (could not allocate {size}{under}); {what} "
                             f"is not at fault: give the process more memory ({more}", path=path)
