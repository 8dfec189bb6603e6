"""The one owner of the processes and thread pools packtool starts: every pool is made here,
and `stop_all` ends them on the interrupt path (Ctrl-C, before the console script leaves).

Why one owner: a process pool left running after a KeyboardInterrupt hangs the exit forever,
because multiprocessing's atexit handler joins every non-daemon child and an idle pool worker
waits for work that never comes (`packtool verify OUT`, Ctrl-C at the wrong instant). Thread
pools cannot hang the console script (it leaves with os._exit), but their queued calls are
cancelled here too so that an in-process caller's Ctrl-C starts nothing new. packtool's other
threads are daemons that nothing joins (packtool-warm, -read, -encode, -lease, -push, -hub-probe,
-template-watchdog): the console script's os._exit ends them where they are.

Worker processes never take the terminal's Ctrl-C: the parent alone decides. A SIGINT sent to
the whole foreground group reached the forkserver (or a worker) while it imported `site` and
printed its own 25-line traceback, and a worker killed by it broke the pool under the parent's
feet. Workers are launched with SIGINT blocked in the launching thread (as multiprocessing
starts its resource tracker): the forkserver, exec'd then, keeps the mask, and every worker it
forks inherits it. They are also launched with the caller's `__main__` hidden, so a user
script's top level never runs again in a worker.

Every call runs under the caller's environment as it is when the call is submitted (`_noted`):
the pools are kept for the process's life and the forkserver (one per process, every pool's)
holds the environment of its first launch, so a library user who set AWS_ENDPOINT_URL (or any
AWS_*, PACKTOOL_*, HF_* variable) after a first verify got workers without it, reaching real AWS.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import types
import weakref
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import contextmanager
from multiprocessing.context import ForkServerContext, ForkServerProcess

from packtool import notes
from packtool.threads import starting

_LOCK = threading.Lock()
_PROCESS_POOLS: dict[int, ProcessPoolExecutor] = {}  # kept for the process's life: start-up paid once
_THREAD_POOLS: weakref.WeakSet = weakref.WeakSet()
STOP_SECONDS = 2.0  # a terminated worker is killed after this long


def cores() -> int:
    """The CPUs this process may run on: every default count of threads or processes. Not
    `os.cpu_count()`, which is the host's: under `taskset`, a cgroup cpuset or a batch
    scheduler's allotment of 2 of 16 cores it started 16 writers, each holding a row group."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity off Linux
        return max(1, os.cpu_count() or 1)


_RAN = "packtool_workers"


@contextmanager
def running(workers: int):
    """Within the block, `workers` threads or processes do the work: an error leaving it records
    that count (the innermost run's), the one the run had, which --workers and cores() are not:
    a one-shard pack writes with one thread whatever they say (min(shards, workers)), and the
    CLI's out-of-memory line tells "--workers 1" only to a run that had more (RB-7)."""
    try:
        yield
    except BaseException as e:
        if getattr(e, _RAN, None) is None:
            try:
                setattr(e, _RAN, workers)
            except AttributeError:  # an exception type that takes no attribute: the count is unknown
                pass
        raise


def workers_run(e: BaseException) -> int | None:
    """The workers the run that `e` (or an error it came from) ended had, where one recorded it."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if (n := getattr(e, _RAN, None)) is not None:
            return n
        e = e.__cause__ or e.__context__
    return None


def process_pool(workers: int) -> ProcessPoolExecutor:
    """The pool of `workers` processes shared by every caller in this process (start-up is
    paid once); its processes take no Ctrl-C and never import the caller's main module."""
    with _LOCK:
        pool = _PROCESS_POOLS.get(workers)
        if pool is None:
            pool = _PROCESS_POOLS[workers] = ProcessPoolExecutor(workers, mp_context=_WorkerContext())
        return pool


def submit_all(pool: ProcessPoolExecutor, fn, items) -> list:
    """`pool.submit(fn, item)` for each item (the pool launches its workers on the first ones),
    with Ctrl-C and SIGTERM held back until every worker launched is one the pool knows: raised
    inside a launch, it left a started worker that no one stopped, which then failed to unpickle
    its queue's lock (the parent gone) and printed a traceback."""
    if threading.current_thread() is not threading.main_thread():  # no signal is handled here
        return [_noted(pool, fn, x) for x in items]
    got: list[int] = []
    sigs = (signal.SIGINT, signal.SIGTERM)
    old = {s: signal.signal(s, lambda sig, frame: got.append(sig)) for s in sigs}
    try:
        return [_noted(pool, fn, x) for x in items]
    finally:
        for s in sigs:
            signal.signal(s, old[s])
        for s in dict.fromkeys(got):  # each held signal once, as it would have landed
            if callable(old[s]):
                old[s](s, None)  # SIGINT's default handler raises KeyboardInterrupt
            elif old[s] == signal.SIG_DFL:
                signal.raise_signal(s)


def _noted(pool: ProcessPoolExecutor, fn, item) -> Future:
    """`pool.submit(fn, item)`, whose notes (packtool.notes) the worker keeps and this process
    says, once, as the call ends: with its result, or before its error is raised. The call runs
    under this process's environment as it is now (`_as_submitted`)."""
    with starting():  # the first submit starts the executor's manager and feeder threads (R2B-5)
        inner = pool.submit(_as_submitted, dict(os.environ), fn, item)
    outer = Future()

    def done(f: Future) -> None:
        if f.cancelled():
            outer.cancel()
            return
        try:
            result, said = f.result()
        except BaseException as e:  # the call's error (or the pool's): its notes first
            notes.heard(error=e)
            outer.set_exception(e)
            return
        notes.heard(said)
        outer.set_result(result)

    inner.add_done_callback(done)
    return outer


def _as_submitted(environ: dict, fn, item):
    """In a worker: `notes.held(fn, item)` with os.environ made `environ`, the caller's when it
    submitted the call (every call sets it, so a worker's earlier call leaves nothing behind).
    Through os.environ, so native code (Arrow's S3 client, the AWS chain) reads it too."""
    for k in [k for k in os.environ if k not in environ]:
        del os.environ[k]
    for k, v in environ.items():
        if os.environ.get(k) != v:
            os.environ[k] = v
    return notes.held(fn, item)


class _ThreadPool(ThreadPoolExecutor):
    """Its threads start as calls are submitted: one the system would not start is ThreadRefused."""

    def submit(self, fn, /, *args, **kwargs) -> Future:
        with starting():
            return super().submit(fn, *args, **kwargs)


def thread_pool(threads: int, name: str) -> ThreadPoolExecutor:
    """A ThreadPoolExecutor whose queued calls `stop_all` cancels."""
    pool = _ThreadPool(threads, thread_name_prefix=name)
    _THREAD_POOLS.add(pool)
    return pool


@contextmanager
def _launching():
    """While a worker is launched (and the forkserver with the first one): SIGINT blocked in
    this thread, whose mask an exec'd server keeps; `__main__` an empty module, so that
    multiprocessing tells the worker nothing about the caller's main module."""
    with _MAIN_LOCK:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        real = sys.modules.get("__main__")
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            yield
        finally:
            sys.modules["__main__"] = real
            if signal.SIGINT not in old:  # a Ctrl-C that came meanwhile is delivered now
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


_MAIN_LOCK = threading.Lock()


class _WorkerProcess(ForkServerProcess):
    @staticmethod
    def _Popen(process_obj):
        with _launching():
            return ForkServerProcess._Popen(process_obj)


class _WorkerContext(ForkServerContext):
    # forkserver: Arrow and numba keep threads, which fork would copy in a broken state
    Process = _WorkerProcess


def stop_process_pool(pool: ProcessPoolExecutor) -> None:
    """End `pool` now: its workers terminated (killed if they linger), its manager thread
    joined, and it is no longer handed out. Pending calls fail with BrokenProcessPool, which
    no one waits for."""
    with _LOCK:
        for k, p in list(_PROCESS_POOLS.items()):
            if p is pool:
                del _PROCESS_POOLS[k]
    # private state, read because the executor has no public way to stop running work: its
    # shutdown waits for the calls in flight (or, with wait=False, leaves the workers running
    # for multiprocessing's atexit handler to join)
    procs = list((getattr(pool, "_processes", None) or {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)
    for p in procs:
        _quietly(p.terminate)
    for p in procs:
        _quietly(p.join, STOP_SECONDS)
        if p.exitcode is None:
            _quietly(p.kill)
            _quietly(p.join, STOP_SECONDS)
    if manager is not None and manager is not threading.current_thread() and manager.ident is not None:
        manager.join(STOP_SECONDS)  # it saw the workers end and marked their calls broken (if it started)
    _quietly(lambda: pool.shutdown(wait=False, cancel_futures=True))


def stop_all() -> None:
    """Ctrl-C: every pool packtool started ends before the process leaves."""
    for pool in list(_THREAD_POOLS):
        _quietly(lambda: pool.shutdown(wait=False, cancel_futures=True))
    with _LOCK:
        pools = list(_PROCESS_POOLS.values())
    for pool in pools:
        stop_process_pool(pool)


def _quietly(fn, *args) -> None:
    try:
        fn(*args)
    except (OSError, ValueError, AssertionError):  # already gone, closed, or never started
        pass
