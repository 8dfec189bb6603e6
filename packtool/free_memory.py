"""The memory this machine has available now: the one probe every bound asks (planning's
capacity and worker bounds, the HF mask, the tokenize stage's whole-file reads), so that
each refuses what cannot fit against the same figure, and a test stands in for one place; and
what a failed allocation while decoding a file, or a mapping of it refused for memory, is
(`decode_out_of_memory`): out of memory, never a damaged file."""
from __future__ import annotations

import os
import re
import resource
from contextlib import contextmanager


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
# an accelerator's out of memory, in torch's words: the caching allocator's ("CUDA out of memory.
# Tried to allocate ..."), a runtime call's ("CUDA error: out of memory": context, cuBLAS, NCCL),
# MPS's ("MPS backend out of memory"), XPU's, ROCm's ("HIP out of memory"); NCCL's ("Cuda failure 2
# 'out of memory'") and Triton's ("Triton Error [CUDA]: out of memory"), R2B-3
_DEVICE = re.compile(r"\b(?:CUDA|HIP|MPS|XPU)\b(?: error:| backend|\]:)? out of memory\b"
                     r"|\b(?:Cuda|Hip) failure \d+ 'out of memory'", re.I)
# numpy's ("Unable to allocate 61.0 MiB for an array with shape ...") and torch's CPU allocator's
# ("DefaultCPUAllocator: can't allocate memory: you tried to allocate 64000000 bytes")
_NUMPY = re.compile(r"Unable to allocate ([\d.]+ [KMGTPE]?i?B)")
_TORCH = re.compile(r"can't allocate memory(?:: you tried to allocate (\d+) bytes)?")
# a file mapped whole that the address space cannot hold (what `ulimit -v` refuses first wherever
# a file is mapped: Arrow IPC inputs, datasets' conversion): Arrow says "Memory mapping file
# failed: Cannot allocate memory" (no errno), numpy's and Python's mmap ENOMEM
_MAPPING = re.compile(r"Memory mapping file failed|Cannot allocate memory", re.I)
# each memory limit: its words, its flag, what /proc/self/status counts against it
_LIMITS = ((resource.RLIMIT_AS, "the address-space limit", "ulimit -v", "VmSize"),
           (resource.RLIMIT_DATA, "the data-size limit", "ulimit -d", "VmData"))


def memory_limits() -> list[tuple[str, str, int, int | None]]:
    """Each memory limit set on this process: (its words, its flag, the soft limit in bytes, what
    the process counts against it now, None where unknown): the one table of which limit is
    which (a thread refused named ulimit -v for a ulimit -d limit: RB-2)."""
    out = []
    for lim, words, flag, field in _LIMITS:
        soft = resource.getrlimit(lim)[0]
        if soft != resource.RLIM_INFINITY:
            out.append((words, flag, soft, _status_bytes(field)))
    return out


def _status_bytes(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


class DecodeOutOfMemory(MemoryError):
    """A file packtool reads, or the arrays built from it, that this process had no memory for:
    the file is not at fault, so never "corrupt" (the CLI's out-of-memory line, kind `resources`).
    `path` is the file (--json's path; the line names it already), None where no file is read."""

    def __init__(self, message: str, path: str | None = None):
        super().__init__(message)
        self.path = path


def device_out_of_memory(e: BaseException) -> bool:
    """Whether `e` is an accelerator's out of memory (torch's words, or its OutOfMemoryError class
    with none), not this process's: the one rule of the readers' doors and train's (RB-3)."""
    return bool(_DEVICE.search(" ".join(str(e).split()))) or any(
        c.__name__ == "OutOfMemoryError" and c.__module__.startswith("torch") for c in type(e).__mro__)


def failed_allocation(e: BaseException) -> str | None:
    """What an allocation that failed asked for ("61.0 MiB", or "memory" where `e` does not say),
    when `e` is one (Arrow's, numpy's, torch's CPU allocator's, C++'s bad_alloc in an OSError);
    else None."""
    if device_out_of_memory(e):
        return None  # an accelerator's memory, not this process's: torch's own line says it (RB-3)
    text = " ".join(str(e).split())
    if m := _NUMPY.search(text):
        return m[1]
    if (m := _ALLOCATION.search(text)) or (m := _TORCH.search(text)):
        return f"{int(m[1]) / 2**20:,.1f} MiB" if m[1] else "memory"
    return "memory" if isinstance(e, MemoryError) else None


def out_of_memory(e: BaseException, where: str, doing: str, fault: str, more: str,
                  path: str | None = None) -> DecodeOutOfMemory | None:
    """The one out-of-memory line of every door that reads an output or builds batches from it,
    when `e` is an allocation that failed (else None): `where` (a file, a slab, a batch), what it
    was `doing`, what could not be allocated, the process's limits, that `fault` (the file, the
    slabs) is not at fault, and `more`: how to give it more memory or need less there."""
    size = failed_allocation(e)
    mapped = size is None and mapping_refused(e)
    if size is None and not mapped:
        return None
    doing, could = ("mapping it", "could not map it into memory") if mapped else (doing, f"could not allocate {size}")
    limits = [f"{words} ({flag}) is {soft / 2**20:,.0f} MiB" for words, flag, soft, _ in memory_limits()]
    under = f"; {', '.join(limits)}" if limits else ""
    return DecodeOutOfMemory(f"{where}: out of memory {doing} ({could}{under}); {fault} is not at "
                             f"fault: give the process more memory ({more}", path=path)


def mapping_refused(e: BaseException) -> bool:
    """A file's memory mapping (or an allocation) the system refused for memory: ENOMEM, or
    Arrow's "Memory mapping file failed: Cannot allocate memory", which carries no errno."""
    import errno
    return isinstance(e, OSError) and (e.errno == errno.ENOMEM or bool(_MAPPING.search(str(e))))


def decode_out_of_memory(e: BaseException, path: str, part: str | None = None, *, what: str = "the file",
                         less: str | None = None) -> MemoryError | None:
    """For an error caught decoding `path` (its `part`, e.g. `row group 3`): the out-of-memory
    error naming the file, what could not be allocated and the process's limit, when `e` is an
    allocation that failed (an Arrow MemoryError, or one Parquet's decoder wrapped); else None.
    `what` is not at fault, and `less` is how the caller's door reads less at once, where it has
    one ("read less at once" named no flag that does)."""
    if not (isinstance(e, MemoryError) or _ALLOCATION.search(" ".join(str(e).split())) or mapping_refused(e)):
        return None
    where = f"{path} {part}" if part else f"{path}"
    more = f"raise the limit) or {less}" if less else "raise the limit, or run on a machine with more memory)"
    return out_of_memory(e, where, "decoding it", what, more, path=path)


@contextmanager
def mapped(path: str, what: str = "the file", less: str | None = None):
    """Around mapping `path` (np.memmap, np.load's mmap_mode, mmap.mmap): a mapping the system refuses
    for memory (ENOMEM: the address space a ulimit -v leaves cannot hold the file) is packtool's
    out-of-memory error naming the file (DecodeOutOfMemory, kind `resources`), as every read of a
    file is; it reached a library caller as a bare OSError, said only by the command line's translation."""
    try:
        yield
    except OSError as e:
        oom = decode_out_of_memory(e, path, what=what, less=less)
        if oom is None:
            raise
        raise oom from None
