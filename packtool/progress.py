"""What a user sees on long work outside tokenizing: a progress bar on stderr for `verify` and
`inspect` on large outputs, and one line when a numba kernel this run uses is compiled (the
first run on a machine; later runs load them from numba's cache). The compile seconds are
counted, so that timings can report them apart."""
from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from typing import Callable, Iterator

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
    with p:
        yield lambda n: p.update(task, advance=n)


def large(paths: list[str]) -> bool:
    """Whether files this large are worth a progress bar."""
    total = 0
    for p in paths:
        try:
            total += os.path.getsize(p)
        except OSError:
            pass
    return total >= PROGRESS_MIN_BYTES


class _CompileWatch:
    """numba's "numba:compile" events (fired on a cache miss only, never on a load from the
    on-disk cache) for packtool's own kernels: the outermost compile's seconds are summed so
    that timings can leave them out, and the first one can be announced."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.announce = False
        self._depth = 0
        self._t0 = 0.0

    @staticmethod
    def _ours(event) -> bool:
        disp = (event.data or {}).get("dispatcher")
        return getattr(getattr(disp, "py_func", None), "__module__", "").startswith("packtool")

    def on_start(self, event) -> None:
        if not self._ours(event):
            return
        self._depth += 1  # nested: a kernel's callee compiles inside it (one thread: numba's lock)
        if self._depth == 1:
            if self.announce and "compile" not in _said:
                _said.add("compile")
                print("packtool: first run on this machine: compiling the packing kernels (numba, "
                      "once per machine); later runs load them from the cache",
                      file=sys.stderr, flush=True)
            self._t0 = time.perf_counter()

    def on_end(self, event) -> None:
        if not self._ours(event):
            return
        self._depth -= 1
        if self._depth == 0:
            self.seconds += time.perf_counter() - self._t0


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
        _watch = w
    return _watch


def compile_seconds() -> float:
    """Seconds this process has spent compiling packtool's numba kernels so far (loads from
    numba's on-disk cache are not compiles). Watching starts on the first call."""
    return _watching().seconds


def say_if_compiling(enabled: bool = True) -> None:
    """From now on, say once per process when a kernel this run uses is compiled rather than
    loaded from numba's cache: the first run on a machine (it takes a while). Only the kernels
    actually used count: a run that needs no compile says nothing."""
    if enabled:
        _watching().announce = True


__all__ = ["PROGRESS_MIN_BYTES", "bar", "compile_seconds", "large", "say_if_compiling"]
