"""What a user sees on long work outside tokenizing: a progress bar on stderr for `verify` and
`inspect` on large outputs, and one line when a numba kernel this run uses is compiled (the
first run on a machine; later runs load them from numba's cache). The compile seconds are
counted, so that timings can report them apart."""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from packtool.storage import file_size
from packtool.threads import starting

# Below this many bytes of shards the work takes about a second: no bar.
PROGRESS_MIN_BYTES = 64 << 20

_said: set[str] = set()


@contextmanager
def bar(label: str, total: int, unit: str, enabled: bool = True) -> Iterator[Callable[[int], None]]:
    """`advance(n)` for a transient rich bar on stderr; a no-op when not enabled."""
    if not enabled or total <= 0:
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
    p = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TextColumn(unit),
                 TimeRemainingColumn(), console=Console(stderr=True), transient=True)
    task = p.add_task(label, total=total)
    with starting():  # its refresh thread
        p.start()
    try:
        yield lambda n: p.update(task, advance=n)
    finally:
        p.stop()


def large(paths: list[str]) -> bool:
    """Whether files this large are worth a progress bar."""
    total = 0
    for p in paths:
        try:
            total += file_size(p)
        except (OSError, ValueError):
            pass
    return total >= PROGRESS_MIN_BYTES


class _Span:
    """Seconds spent inside an event kind, per thread, outermost only (events nest: a kernel's
    callee compiles inside it; numba's compiler lock is re-entered)."""

    def __init__(self) -> None:
        self.local = threading.local()
        self.total: dict[int, float] = {}

    def start(self) -> bool:
        d = getattr(self.local, "depth", 0)
        self.local.depth = d + 1
        if d == 0:
            self.local.t0 = time.perf_counter()
        return d == 0

    def end(self) -> None:
        d = getattr(self.local, "depth", 0)
        if d == 0:  # began before the watch was registered (another thread held numba's lock)
            return
        self.local.depth = d - 1
        if self.local.depth == 0:
            k = threading.get_ident()
            self.total[k] = self.total.get(k, 0.0) + time.perf_counter() - self.local.t0

    def seconds(self) -> float:
        return self.total.get(threading.get_ident(), 0.0)


class _CompileWatch:
    """numba's events: "numba:compile" fires on a cache miss only (never on a load from the
    on-disk cache), for packtool's own kernels the first one is announced; the compiler lock
    is held for a compile and for a load from the cache alike. Both are timed per thread, so
    that a timing can leave them out and report them apart."""

    def __init__(self) -> None:
        self.announce = False
        self.compiles, self.kernels = _Span(), _Span()

    @staticmethod
    def _ours(event) -> bool:
        disp = (event.data or {}).get("dispatcher")
        return getattr(getattr(disp, "py_func", None), "__module__", "").startswith("packtool")

    def on_start(self, event) -> None:
        if event.kind == "numba:compiler_lock":
            self.kernels.start()
        elif self._ours(event) and self.compiles.start() and self.announce and "compile" not in _said:
            _said.add("compile")
            from packtool.notes import note
            note("first run on this machine: compiling the packing kernels (numba, "
                 "once per machine); later runs load them from the cache")

    def on_end(self, event) -> None:
        if event.kind == "numba:compiler_lock":
            self.kernels.end()
        elif self._ours(event):
            self.compiles.end()


_watch: _CompileWatch | None = None


def _watching() -> _CompileWatch:
    global _watch
    if _watch is None:
        from numba.core import event

        class _Listener(event.Listener):
            def on_start(self, ev) -> None:
                w.on_start(ev)

            def on_end(self, ev) -> None:
                w.on_end(ev)

        w = _CompileWatch()
        event.register("numba:compile", _Listener())
        event.register("numba:compiler_lock", _Listener())
        _watch = w
    return _watch


def compile_seconds() -> float:
    """Seconds this thread has spent compiling packtool's numba kernels so far (loads from
    numba's on-disk cache are not compiles). Watching starts on the first call."""
    return _watching().compiles.seconds()


def kernel_seconds() -> float:
    """Seconds this thread has spent in numba's compiler lock so far: compiles and loads of
    kernels from the on-disk cache (once per process), and waits for another thread's."""
    return _watching().kernels.seconds()


def say_if_compiling(enabled: bool = True) -> None:
    """From now on, say once per process when a kernel this run uses is compiled rather than
    loaded from numba's cache: the first run on a machine (it takes a while). Only the kernels
    actually used count: a run that needs no compile says nothing."""
    if enabled:
        _watching().announce = True


__all__ = ["PROGRESS_MIN_BYTES", "bar", "compile_seconds", "kernel_seconds", "large", "say_if_compiling"]
