"""Bytes searched, counted rather than timed: what the tests that hold a reader to one pass over
a long line count."""
from __future__ import annotations

import sys

# the bytes methods that walk the object they are called on
_SCANS = {"find", "rfind", "count", "index", "split"}


def bytes_searched(fn, catch: tuple[type[BaseException], ...] = ()) -> tuple[int, object]:
    """(bytes every find/rfind/count/index/split call on a bytes object went over while `fn` ran,
    what `fn` returned, or the `catch` error it raised). Heard through sys.setprofile, so the
    C calls are counted with the object each one scans."""
    total = 0

    def hook(frame, event, arg):
        nonlocal total
        if event == "c_call" and getattr(arg, "__name__", "") in _SCANS and isinstance(
                getattr(arg, "__self__", None), bytes):
            total += len(arg.__self__)

    sys.setprofile(hook)
    try:
        try:
            out = fn()
        except catch as e:
            out = e
    finally:
        sys.setprofile(None)
    return total, out
