"""A thread the system would not start: what it looks like from Python, packtool's error for it
(`ThreadRefused`, kind `resources`), and the limit that refused it. Under a memory limit too small
for one more stack, or a limit on threads, Python's threading raises RuntimeError("can't start new
thread") and the tokenizer's rayon pool panics (pyo3's PanicException, a BaseException that no
`except Exception` catches). Neither is a packtool bug nor the data's fault: every thread packtool
starts (`start`, `starting`, workers' pools) and the tokenizer's pool (tokenize.encode_pool) raise
ThreadRefused instead, so a library caller gets the line the command prints (RB-8).

`held_stderr`: native code that prints its own lines for the same refusal (rust's panic hook,
OpenBLAS's four lines) runs with fd 2 held, so that packtool's one line is the only one said."""
from __future__ import annotations

import fcntl
import os
import resource
import sys
from contextlib import contextmanager

from packtool.errors import PacktoolError, one_line
from packtool.free_memory import memory_limits

# the tokenizer's rayon pool says ThreadPoolBuildError with the errno's words
_REFUSED_PANIC = ("ThreadPoolBuildError", "Resource temporarily unavailable", "Cannot allocate memory")
_UNSIZED_STACK = 32 << 20  # a thread's stack under an unlimited ulimit -s: at most this (glibc's default)
FEWER = "or run fewer threads (RAYON_NUM_THREADS=1 for the tokenizer's pool)"


class ThreadRefused(PacktoolError):
    """A thread (packtool's, or the tokenizer's pool) that the system would not start: the run's
    limit, said with the limit and the fix. `said`: what refused it, `native`: a Rust pool's threads
    (whose stacks are Rust's 2 MiB, not ulimit -s)."""

    kind = "resources"

    def __init__(self, message: str = "", *, said: str = "", native: bool = False, **where) -> None:
        super().__init__(message, **where)
        self.said, self.native = said, native


def native_panic(e: BaseException) -> bool:
    """A Rust library's panic raised into Python (pyo3's PanicException: no Exception, so no
    `except Exception` catches it)."""
    return type(e).__name__ == "PanicException" and type(e).__module__ in ("pyo3_runtime", "builtins")


def thread_refused(e: BaseException) -> bool:
    """A thread (of packtool, Arrow's or the tokenizer's pool) the system would not start: under a
    memory limit too small for one more stack, or a limit on threads. Never a packtool bug."""
    if isinstance(e, ThreadRefused):
        return True
    text = str(e)
    if isinstance(e, RuntimeError) and "can't start new thread" in text:
        return True
    return native_panic(e) and any(w in text for w in _REFUSED_PANIC)


def _kib(n: int) -> str:
    return f"{n // 1024:,} KiB"


def limit_words(native: bool, fewer: str = FEWER) -> str:
    """Which limit refused a thread, and the fix (`fewer`: how to run fewer). `native`: a Rust
    pool's threads, whose stacks are Rust's size (2 MiB), not ulimit -s."""
    stack = resource.getrlimit(resource.RLIMIT_STACK)[0]
    sized = stack != resource.RLIM_INFINITY and not native
    room = stack if sized else (2 << 20 if native else _UNSIZED_STACK)
    # a limit the process is far below did not refuse a stack: many clusters set a large ulimit -v,
    # and a refusal by the thread or pids limit was said as memory (RB-2)
    limits = memory_limits()
    full = [(words, flag, soft) for words, flag, soft, used in limits if used is None or used + room > soft]
    if full:
        words, flag, soft = full[0]
        each = f", {_kib(stack)} each (ulimit -s)" if sized else ""
        return f"{words} ({_kib(soft)}, {flag}) has no room for another thread's stack{each}: raise the limit, {fewer}"
    room = "".join(f"; {words} ({flag}) is not what refused it ({_kib(used)} used of {_kib(soft)})"
                   for words, flag, soft, used in limits)
    return f"the system allows no more threads (ulimit -u, or a container's pids limit): raise that limit, {fewer}{room}"


def what_refused(e: BaseException) -> tuple[str, bool]:
    """(what refused the thread, as the line says it in parentheses; whether a Rust pool's)."""
    if isinstance(e, ThreadRefused):
        return e.said or one_line(e), e.native
    if native_panic(e):
        errno = next((w for w in _REFUSED_PANIC[1:] if w in str(e)), "refused")
        return f"the tokenizer's thread pool: {errno}", True
    return one_line(e), False


def thread_line(e: BaseException, where: str = "") -> str:
    """The one line for `thread_refused(e)`: `where` it happened (` in `packtool pack` while ...`),
    what refused it, the limit and the fix."""
    said, native = what_refused(e)
    return f"could not start a thread{where} ({said}); {limit_words(native)}"


def refused(e: BaseException) -> ThreadRefused:
    """packtool's error for `e`, a thread the system would not start (`thread_refused(e)`)."""
    if isinstance(e, ThreadRefused):
        return e
    said, native = what_refused(e)
    return ThreadRefused(thread_line(e), said=said, native=native)


@contextmanager
def starting():
    """Around a call that starts threads of a library packtool uses (rich's bar refresh): a thread
    refused is ThreadRefused."""
    try:
        yield
    except RuntimeError as e:
        if thread_refused(e):
            raise refused(e) from None
        raise


def start(t):
    """Start `t` (a threading.Thread of packtool's): a thread refused is ThreadRefused."""
    with starting():
        t.start()
    return t


class HeldStderr:
    """What native code wrote to fd 2 within the block, held back (`text`) instead of printed:
    `said()` prints it after all, where it was not the refusal packtool says in its own line.
    The pipe's ends are non-blocking: a writer finding it full loses the rest (it is at most a
    few lines), and reading it back never waits on a child that inherited fd 2."""

    def __init__(self) -> None:
        self.text, self._saved = b"", None

    def __enter__(self) -> "HeldStderr":
        try:
            r, w = os.pipe()
        except OSError:  # no descriptor left: print as it comes
            return self
        for fd in (r, w):
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        _flush()
        try:
            self._saved = os.dup(2)
            os.dup2(w, 2)
        except OSError:
            if self._saved is not None:
                os.close(self._saved)
            self._saved = None
            os.close(r)
        else:
            self._r, self._pipe = r, _identity(w)
        os.close(w)
        return self

    def __exit__(self, *exc) -> None:
        if self._saved is None:
            return
        _flush()
        if _identity(2) == self._pipe:  # fd 2 made another file within the block is its maker's to keep
            os.dup2(self._saved, 2)
        os.close(self._saved)
        chunks = []
        try:
            while chunk := os.read(self._r, 1 << 16):
                chunks.append(chunk)
        except BlockingIOError:
            pass
        finally:
            os.close(self._r)
        self.text, self._saved = b"".join(chunks), None

    def said(self) -> None:
        if self.text:
            _flush()
            view = memoryview(self.text)
            while view:
                view = view[os.write(2, view):]
            self.text = b""  # said once


def _identity(fd: int) -> tuple[int, int] | None:
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _flush() -> None:
    try:
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass


__all__ = ["FEWER", "HeldStderr", "ThreadRefused", "limit_words", "native_panic", "refused", "start", "starting",
           "thread_line", "thread_refused", "what_refused"]
