"""Read-ahead for pre-tokenized files: the next record batches are decoded by a helper thread
while the caller checks and hands off the current one.

Decoding Parquet (dictionary + snappy pages into int32 lists) releases the GIL and was the
longest serial step of a pre-tokenized ingest (about 3 CPU-s per 300M tokens); on its own
thread it overlaps the checks, the flat store's writes and the input hashing. Bounded: at
most `depth` decoded batches wait.
"""
from __future__ import annotations

import atexit
import queue
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import Future

from packtool.threads import start


def read_ahead(batches: Iterable, depth: int = 2) -> Iterator:
    """The items of `batches`, in order, produced by a helper thread up to `depth` ahead. An
    error raised while producing is raised here; stopping early stops the thread."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    end = object()

    def put(item) -> bool:
        while not stop.is_set():  # the consumer may have stopped early
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                pass
        return False

    def produce() -> None:
        try:
            for b in batches:
                if not put((True, b)):
                    return
            put((True, end))
        except BaseException as e:  # noqa: BLE001  (handed to the consumer, raised there)
            put((False, e))

    t = start(threading.Thread(target=produce, name="packtool-read", daemon=True))
    try:
        while True:
            ok, b = q.get()
            if not ok:
                raise b
            if b is end:
                return
            yield b
            del b
    finally:
        stop.set()
        t.join()


def warm_compiled_code() -> threading.Thread:
    """Start numba's compiler target on a helper thread. Its first use in a process costs
    ~0.4-0.7 s (LLVM and the CPU target set up, before any cached function loads), paid on
    whichever thread calls a compiled function first; begun here, it overlaps hashing the
    inputs instead of stalling the first batch. Later loads of cached functions take ms."""
    def warm() -> None:
        import numpy as np

        from packtool.tokenize.token_rows import first_outside
        try:
            first_outside(np.zeros(1, np.int32), 1)
        finally:
            _WARMING.discard(threading.current_thread())

    t = threading.Thread(target=warm, name="packtool-warm", daemon=True)
    _WARMING.add(t)
    try:
        start(t)
    except BaseException:  # not started (no room for its stack): nothing for the exit to join
        _WARMING.discard(t)
        raise
    return t


def _join_warming() -> None:
    """At exit, before the interpreter's teardown: a program that imports the library and ends
    within the compile (an input error in its first second) tore the interpreter down under
    the thread while it was in LLVM with the GIL released; Py_Finalize made it exit as it came
    back, the forced unwind met a C++ frame and std::terminate aborted the process (exit 134)."""
    for t in list(_WARMING):
        t.join(_WARM_JOIN_S)


_WARMING: set = set()
_WARM_JOIN_S = 60.0  # the compile takes ~0.5 s; a machine so loaded is better waited for
atexit.register(_join_warming)


class EncodePool:
    """A fixed set of daemon threads running submitted calls, as ThreadPoolExecutor does,
    except that leaving the `with` block on an error or Ctrl-C does not wait for the calls
    still running. An encode_batch call on ~1 MB of long documents runs for seconds in native
    code that no signal interrupts; ThreadPoolExecutor joins it on the way out (and again at
    interpreter exit), so Ctrl-C took 4-10 s to end a tokenizing pack. Here those calls finish
    on their own and their results are dropped; the process ends without them. A clean exit
    still runs every submitted call to its end. Threads start as ThreadPoolExecutor's do: one
    more only when a call finds none idle (three threads started up front cost 0.3-0.5 CPU-s
    more per tokenize of the PEPs in 5 of 6 alternating pairs on 2 cores; started on demand,
    no difference was measurable: bench/results/side_nonfinite/tokenize_peps_gpt2_ab.jsonl)."""

    def __init__(self, threads: int, name: str = "packtool-encode") -> None:
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._max, self._name = threads, name
        self._idle = threading.Semaphore(0)
        self._threads: list[threading.Thread] = []

    def _work(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            fut, fn, args = item
            if not fut.set_running_or_notify_cancel():  # cancelled while queued
                continue
            try:
                fut.set_result(fn(*args))
            except BaseException as e:  # noqa: BLE001  (the caller's fut.result() raises it)
                fut.set_exception(e)
            del fut, fn, args, item  # an Encoding list dies here, not with the next call
            self._idle.release()

    def submit(self, fn, *args) -> Future:
        fut: Future = Future()
        self._q.put((fut, fn, args))
        if not self._idle.acquire(blocking=False) and len(self._threads) < self._max:
            t = threading.Thread(target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=True)
            self._threads.append(start(t))
        return fut

    def __enter__(self) -> "EncodePool":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        for _ in self._threads:
            self._q.put(None)  # after every queued call: a clean exit runs them all
        if exc_type is None:
            for t in self._threads:
                t.join()
