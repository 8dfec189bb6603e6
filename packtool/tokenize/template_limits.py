"""The bounds on what one rendering of a chat template may do. A template is code run once per
row: bound its output, its range() items, the size of every string or list one operation
builds, and its time, so that a runaway template (nested loops, huge repeats, a 1e9-character
replace) fails on its first row with a clear line, not a hang or an OOM. Sizes are checked
BEFORE the operation where they can be computed: a single C call such as center(3e8) cannot
be interrupted by the timer, and a filter on constants would run at compile time, outside it.
`templates` compiles every template in `template_sizes.Sandbox` (built-ins skip its checks)
with `bounded_range`, and renders inside `rendering()`. Here too: holding a size to the bounds
(`need` before an operation, `checked` on a result as built, counted towards the rendering's
large results) and sizing a value's text without building it (`text_size`); what each
operation would build is `template_sizes`'. Bounds are read at each check (tests lower them).
"""
from __future__ import annotations

import ctypes
import itertools
import threading
import time
from contextlib import contextmanager

import jinja2
from jinja2.runtime import Namespace

from packtool.threads import start

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
        self.tick = 0.5

    def enter(self) -> int:
        seconds = render_seconds()  # a bad PACKTOOL_TEMPLATE_SECONDS is said here, in the caller
        tid = threading.get_ident()
        with self.lock:
            # The thread reads nothing it could fail on: it once read the variable itself every
            # tick, and a process whose environment held a bad value for one tick (a test's
            # CliRunner env, a library user's own os.environ) lost it for good, with no line:
            # every later endless template then hung the run (a pytest worker, in CI)
            self.tick = min(self.tick, seconds / 4) if self.deadline else min(0.5, seconds / 4)
            self.deadline[tid] = time.monotonic() + seconds
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="packtool-template-watchdog",
                                               daemon=True)
                start(self.thread)
        return tid

    def leave(self, tid: int) -> None:
        with self.lock:
            fired = self.deadline.pop(tid, None) is None
        if fired:  # its exception landed in the rendering, or is still pending
            _land_pending()

    def _run(self) -> None:
        while True:
            time.sleep(self.tick)
            now = time.monotonic()
            with self.lock:
                for tid, dl in list(self.deadline.items()):
                    if now > dl:
                        del self.deadline[tid]
                        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid),
                                                                   ctypes.py_object(_TemplateTimeout))


_WATCHDOG = _Watchdog()


class _Landed(BaseException):
    """Raised into its own thread by `_land_pending` and caught there; nowhere else."""


def _checkpoint() -> None:
    """A Python call: its entry checks the interpreter's pending work, async exceptions included."""


def _land_pending() -> None:
    """Drop what the watchdog raised into this thread, if it has not landed yet, by letting it
    land here. Not by PyThreadState_SetAsyncExc(tid, NULL): CPython raises the interpreter's
    "async exception pending" flag for that call too, and only a thread whose exception lands
    lowers it (3.12 too; 3.13 keeps it per thread), so it stayed up for good. Every later call of the process then
    went through the pending-work check, and under a profile or trace function (cProfile,
    coverage, a debugger, a test's sys.setprofile) 3.11 repeats that check at the call's entry
    forever: the next call spun at 100% CPU (a pytest worker, minutes after a template timeout)."""
    tid = ctypes.c_ulong(threading.get_ident())
    try:  # replaces a pending timeout; lands at the first call's entry
        ctypes.pythonapi.PyThreadState_SetAsyncExc(tid, ctypes.py_object(_Landed))
        for _ in range(100):
            _checkpoint()
    except (_Landed, _TemplateTimeout):
        return
    ctypes.pythonapi.PyThreadState_SetAsyncExc(tid, None)  # no CPython gets here: never raise it later


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


# --- holding one operation's result to the bounds ----------------------------------------

def _refuse(what: str, n: int, bound: int, unit: str):
    raise TemplateBudgetError(f"{what} would build {n:,} {unit}, over the {bound:,} one operation "
                              f"may build; fix the template")


def need(what: str, chars: int = 0, items: int = 0) -> None:
    """Refuse an operation before it builds more than MAX_RENDER_CHARS characters or MAX_ITEMS
    items (the bounds README states)."""
    if chars > MAX_RENDER_CHARS:
        _refuse(what, chars, MAX_RENDER_CHARS, "characters")
    if items > MAX_ITEMS:
        _refuse(what, items, MAX_ITEMS, "items")


def _held(what: str, chars: int, items: int) -> None:
    # each large result counted once built: a loop keeping a fresh 10M-character string per
    # pass is refused after a few, however small each one is against the per-operation bound
    if chars >= LARGE_CHARS:
        _budget.chars = getattr(_budget, "chars", 0) + chars
        if _budget.chars > HELD_CHARS:
            raise TemplateBudgetError(f"{what}: large strings (over {LARGE_CHARS:,} characters) built in one "
                                      f"conversation add up to over {HELD_CHARS:,} characters; fix the template")
    if items >= LARGE_ITEMS:
        _budget.items = getattr(_budget, "items", 0) + items
        if _budget.items > HELD_ITEMS:
            raise TemplateBudgetError(f"{what}: large lists (over {LARGE_ITEMS:,} items) built in one "
                                      f"conversation add up to over {HELD_ITEMS:,} items; fix the template")


def checked(what: str, value):
    """A result as built: held to the per-operation bound (what is known only once built: a
    title() or capitalize() that grows, a non-UTF-8 encode(), a JSON's escapes; at most a few
    times inputs whose own size was checked first) and counted towards the per-rendering total
    of large results."""
    if isinstance(value, (str, bytes, bytearray)):
        need(what, chars=len(value))
        _held(what, len(value), 0)
    elif isinstance(value, (list, tuple, dict, set, frozenset)):
        need(what, items=len(value))
        _held(what, 0, len(value))
    return value


def text_size(x, indent: int = 0) -> int:
    """About len(str(x)) (or of its JSON at `indent`), found without building it: a list of a
    million references to one long string is small but renders to terabytes. Stops past the bound."""
    total, stack = 0, [(x, 0)]
    while stack and total <= MAX_RENDER_CHARS:
        v, depth = stack.pop()
        if isinstance(v, Namespace):
            v = v._Namespace__attrs  # noqa: SLF001 (its repr shows them)
        if isinstance(v, (str, bytes, bytearray)):
            total += len(v) + 2
        elif isinstance(v, (list, tuple, dict, set, frozenset)):
            total += 2 + len(v) * (2 + indent * (depth + 1))
            stack += [(i, depth + 1) for i in (itertools.chain(*v.items()) if isinstance(v, dict) else v)]
        elif isinstance(v, int):
            total += v.bit_length() // 3 + 2
        else:
            total += 64
    return total


def take(value, what: str):
    """`value` as something of at most MAX_ITEMS items (a generator taken that far, no further)."""
    try:
        need(what, items=len(value))
        return value
    except TypeError:
        pass
    try:
        items = list(itertools.islice(value, MAX_ITEMS + 1))
    except TypeError:
        return value  # not iterable: the operation itself says so
    need(what, items=len(items))
    return items


def too_long() -> TemplateBudgetError:
    return TemplateBudgetError(f"one conversation renders to over {MAX_RENDER_CHARS:,} "
                               f"characters; fix the template")
