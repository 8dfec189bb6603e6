"""The tokenizer's thread pool (rayon's global pool, on which encode_batch runs over every core),
started once per process before the first encode. A pool the system would not start (its threads
refused: RAYON_NUM_THREADS stacks past a ulimit -v, a thread limit) panics in Rust: the panic
hook prints its own lines on stderr, and pyo3 raises PanicException, which is no Exception, so a
library caller's `except Exception` missed it and the process ended (RB-8). Started here on two
short texts with fd 2 held: a refusal is packtool's ThreadRefused (the command's one line), rust's
lines are dropped, and anything else said meanwhile is printed after all."""
from __future__ import annotations

import os
import threading

from packtool.threads import HeldStderr, refused, thread_refused

_STARTED: set[int] = set()  # the processes (pids) whose pool is running: a forked child has none of its parent's
_LOCK = threading.Lock()


def encode(tok, texts: list[str], fast: bool):
    """`tok.encode_batch_fast` (`fast`) or `encode_batch` of `texts`, its pool started first: a
    thread the system would not start is ThreadRefused, never the tokenizer's panic."""
    call = tok.encode_batch_fast if fast else tok.encode_batch
    if os.getpid() not in _STARTED:
        _start(call)
    try:
        return call(texts, add_special_tokens=False)
    except BaseException as e:  # a pool's panic is no Exception
        if thread_refused(e):
            raise refused(e) from None
        raise


def _start(call) -> None:
    with _LOCK:
        if os.getpid() in _STARTED:
            return
        held = HeldStderr()
        try:
            with held:
                call(["a", "b"], add_special_tokens=False)  # two rows: a parallel call, which builds the pool
        except BaseException as e:
            if thread_refused(e):  # rust's "thread ... panicked" lines are this refusal, said in packtool's line
                raise refused(e) from None
            held.said()
            raise
        held.said()
        _STARTED.add(os.getpid())


__all__ = ["encode"]
