"""Refusing a row the tokenizer cannot hold, before the tokenizer is given it (S35-10).

The tokenizer (HF tokenizers, Rust) allocates for a row at once (per UTF-8 byte of its text, at
least 16 bytes of offsets, and more for each split it makes), and a failed Rust allocation aborts
the process: exit 134 and a Rust backtrace, no `error:` line, a lock and a cache temporary left
behind. It cannot be caught. An allocation fails (rather than the kernel's OOM killer stepping
in) where a limit says so: the address space (`ulimit -v`), the data size (`ulimit -d`), strict
overcommit (vm.overcommit_memory=2), or, under the default heuristic, one allocation larger than
RAM and swap. How much a row needs depends on the tokenizer's pipeline, so no size rule says
which row fits: a row long enough to be in doubt (`_DOUBT` bytes of room per byte of text) is
encoded once in a forked child first, and only a row whose child died of it is refused, as the
README's out-of-memory line (`kind: resources`). The child holds the same address space as this
process, so under the same limits its outcome is this process's; other rows encoded beside it
take room too, so a row that fits alone is not a promise for a batch of them.
"""
from __future__ import annotations

import os
import resource
import signal
import threading

# bytes of room per byte of text under which a row is encoded in a child first; far above what
# any tokenizer pipeline was seen to take, so that rows that surely fit never pay for a probe
_DOUBT = 64
_FORK = threading.Lock()  # one probe at a time: the environment switch below is process-wide


class RowTooLongError(MemoryError):
    """A row whose tokenizing needs more memory than this process may still take. Raised where
    only the encode chunk is known (`index`: the row's place in it); `at` names its file and
    row (from 0) once the chunk's owner adds where the chunk starts, so that the out-of-memory
    line says which row of which file (cli.failure puts them in the line and in --json)."""

    def __init__(self, message: str, index: int = 0, path: str | None = None, row: int | None = None):
        super().__init__(message)
        self.index, self.path, self.row = index, path, row

    def at(self, path: str, first_row: int) -> "RowTooLongError":
        return RowTooLongError(str(self), self.index, path, first_row + self.index)


def _kib(path: str, key: str) -> int | None:
    try:
        with open(path, "rb") as f:
            for line in f:
                if line.startswith(key.encode() + b":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def room() -> tuple[int, str] | None:
    """(bytes one more allocation can still get, the limit that says so), the tightest of the
    limits that make an allocation fail; None where none is known."""
    found = []
    for lim, status, said in ((resource.RLIMIT_AS, "VmSize", "the address-space limit (ulimit -v)"),
                              (resource.RLIMIT_DATA, "VmData", "the data-size limit (ulimit -d)")):
        soft = resource.getrlimit(lim)[0]
        used = _kib("/proc/self/status", status)
        if soft != resource.RLIM_INFINITY and used is not None:
            found.append((soft - used, said))
    try:
        with open("/proc/sys/vm/overcommit_memory") as f:
            mode = f.read().strip()
    except OSError:
        mode = None
    if mode == "2":
        limit, committed = _kib("/proc/meminfo", "CommitLimit"), _kib("/proc/meminfo", "Committed_AS")
        if limit is not None and committed is not None:
            found.append((limit - committed, "strict overcommit (vm.overcommit_memory=2)"))
    elif mode == "0":
        total, swap = _kib("/proc/meminfo", "MemTotal"), _kib("/proc/meminfo", "SwapTotal")
        if total is not None:
            found.append((total + (swap or 0), "the machine's memory and swap"))
    return min(found) if found else None


def refuse_unencodable(tok, texts: list[str], fast: bool) -> None:
    """Raise RowTooLongError for the first row of `texts` that the tokenizer `tok` cannot encode
    in the memory left (`fast`: encoded by encode_batch_fast, as the caller will)."""
    left = room()
    if left is None or not hasattr(os, "fork"):
        return
    for i, text in enumerate(texts):
        if len(text) * _DOUBT <= left[0]:  # characters <= UTF-8 bytes: no probe needed
            continue
        size = len(text.encode("utf-8"))
        if size * _DOUBT > left[0] and not _encodes_in_child(tok, text, fast):
            raise RowTooLongError(
                f"a row of {size / 2**20:.1f} MiB of text cannot be tokenized within {left[1]} "
                f"({max(left[0], 0) / 2**30:.1f} GiB left; tokenizing it was tried apart and ran out); split or "
                f"shorten that row, or give the process more memory", i)


def _encodes_in_child(tok, text: str, fast: bool) -> bool:
    """Whether encoding `text` alone ends, in a forked child (whose abort is its own). The child
    runs the tokenizer serially: the tokenizer's thread pool is not in a forked process, and
    TOKENIZERS_PARALLELISM set says so without the tokenizer's fork warning. A child that ends
    with a Python error (not memory) counts as fitting: the real encode will say what it is."""
    with _FORK:
        before = os.environ.get("TOKENIZERS_PARALLELISM")
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        try:
            pid = os.fork()
        except OSError:  # no room even to fork: the encode itself is in doubt, but unproven
            pid = None
        if pid == 0:
            _child(tok, text, fast)
        if before is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = before
    if pid is None:
        return True
    try:
        _, status = os.waitpid(pid, 0)
    except BaseException:  # Ctrl-C while the child runs: it goes with us
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    return not os.WIFSIGNALED(status)


def _child(tok, text: str, fast: bool) -> None:
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)  # the Rust abort's backtrace is the probe's answer, not the user's to read
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        (tok.encode_batch_fast if fast else tok.encode_batch)([text], add_special_tokens=False)
    finally:
        os._exit(0)


__all__ = ["RowTooLongError", "refuse_unencodable", "room"]
