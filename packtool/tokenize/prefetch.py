"""Read-ahead for pre-tokenized files: the next record batches are decoded by a helper thread
while the caller checks and hands off the current one.

Decoding Parquet (dictionary + snappy pages into int32 lists) releases the GIL and was the
longest serial step of a pre-tokenized ingest (about 3 CPU-s per 300M tokens); on its own
thread it overlaps the checks, the flat store's writes and the input hashing. Bounded: at
most `depth` decoded batches wait.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator


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

    t = threading.Thread(target=produce, name="packtool-read", daemon=True)
    t.start()
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
        first_outside(np.zeros(1, np.int32), 1)

    t = threading.Thread(target=warm, name="packtool-warm", daemon=True)
    t.start()
    return t
