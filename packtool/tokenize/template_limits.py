"""The bounds on what one rendering of a chat template may do. A template is code run once per
row: bound its output, its range() items, the size of every string or list one operation
builds, and its time, so that a runaway template (nested loops, huge repeats, a 1e9-character
replace) fails on its first row with a clear line, not a hang or an OOM. Sizes are checked
BEFORE the operation where they can be computed: a single C call such as center(3e8) cannot
be interrupted by the timer, and a filter on constants would run at compile time, outside it.
`templates` compiles every template in `template_sizes.Sandbox` (built-ins skip its checks)
with `bounded_range`, and renders inside `rendering()`.
"""
from __future__ import annotations

import ctypes
import threading
import time
from contextlib import contextmanager

import jinja2

MAX_RENDER_CHARS = 16 << 20  # text one conversation may render to
MAX_RANGE_ITEMS = 1_000_000  # range() items one rendering may ask for, all calls together
MAX_ITEMS = 1_000_000  # items in a list, tuple or dict one operation may build
LARGE_CHARS, HELD_CHARS = 1 << 20, 64 << 20  # strings this large built in one rendering, all together
LARGE_ITEMS, HELD_ITEMS = 1 << 16, 4_000_000  # lists this large built in one rendering, all together
RENDER_SECONDS: float | None = None  # one rendering; None: PACKTOOL_TEMPLATE_SECONDS, else 20


def render_seconds() -> float:
    from packtool.env import env_seconds
    return RENDER_SECONDS if RENDER_SECONDS is not None else env_seconds("PACKTOOL_TEMPLATE_SECONDS", 20.0)


class TemplateBudgetError(jinja2.exceptions.TemplateError):
    """A rendering went over MAX_RENDER_CHARS, MAX_RANGE_ITEMS, MAX_ITEMS or RENDER_SECONDS."""


class _TemplateTimeout(TemplateBudgetError):
    def __init__(self, *a) -> None:
        super().__init__(f"rendering one conversation took over {render_seconds():g} s (a loop "
                         f"that does not end?); fix the template")


_budget = threading.local()


def bounded_range(*args):
    r = range(*args)
    left = getattr(_budget, "left", MAX_RANGE_ITEMS) - len(r)
    _budget.left = left
    if left < 0:
        raise TemplateBudgetError(f"the template asks range() for over {MAX_RANGE_ITEMS:,} items "
                                  f"in one conversation; fix the template")
    return r


class _Watchdog:
    """Stops a rendering that runs past RENDER_SECONDS by raising `_TemplateTimeout` in its
    thread (rendering is pure Python). One thread for the process; a rendering costs two
    dict operations."""

    def __init__(self) -> None:
        self.deadline: dict[int, float] = {}
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def enter(self) -> int:
        if self.thread is None:
            with self.lock:
                if self.thread is None:
                    self.thread = threading.Thread(target=self._run, name="packtool-template-watchdog",
                                                   daemon=True)
                    self.thread.start()
        tid = threading.get_ident()
        self.deadline[tid] = time.monotonic() + render_seconds()
        return tid

    def leave(self, tid: int) -> None:
        with self.lock:
            if self.deadline.pop(tid, None) is None:  # fired: drop the exception if still pending
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), None)

    def _run(self) -> None:
        while True:
            time.sleep(min(0.5, render_seconds() / 4))
            now = time.monotonic()
            with self.lock:
                for tid, dl in list(self.deadline.items()):
                    if now > dl:
                        del self.deadline[tid]
                        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid),
                                                                   ctypes.py_object(_TemplateTimeout))


_WATCHDOG = _Watchdog()


@contextmanager
def rendering():
    """One rendering's budget: MAX_RANGE_ITEMS range() items afresh, RENDER_SECONDS on the
    watchdog (a fired one's exception dropped if still pending when it ends). Yields the
    characters it may render to (MAX_RENDER_CHARS; past them, raise `too_long()`)."""
    _budget.left, _budget.chars, _budget.items = MAX_RANGE_ITEMS, 0, 0
    tid = _WATCHDOG.enter()
    try:
        yield MAX_RENDER_CHARS
    finally:
        _WATCHDOG.leave(tid)


def too_long() -> TemplateBudgetError:
    return TemplateBudgetError(f"one conversation renders to over {MAX_RENDER_CHARS:,} "
                               f"characters; fix the template")
