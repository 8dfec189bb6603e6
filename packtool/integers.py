"""Integer arguments of the library (lengths, counts, sizes), checked in one place: a float
would be truncated by the int64 cast (5.7 -> 5), a bool read as 1, a uint64 above 2^63-1 as a
negative number, a Python int beyond int64 end in a raw OverflowError deep in numpy. Each is
one line naming the argument and the range it takes. numpy only: `packtool.online` imports it.
"""
from __future__ import annotations

import numpy as np

from packtool.errors import PacktoolError, PacktoolInputError, arg

INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
TOKEN_ID_BOUND = 2**31  # FORMAT.md: token ids in [0, vocab_size), below 2^31 (int32) without a vocabulary


def short(value) -> str:
    """repr of a value, cut to a line's worth (10**400 is 401 digits)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...{text[-8:]} ({len(text)} characters)"


def _range(minimum: int, maximum: int) -> str:
    low = {0: "a nonnegative integer", 1: "a positive integer"}.get(minimum, f"an integer >= {minimum}")
    return f"{low} up to {_power(maximum)}"


def int_value(name: str, value, minimum: int = 0, maximum: int = INT64_MAX, optional: bool = False,
              error: type[PacktoolError] = PacktoolInputError) -> int | None:
    """`value` as an int when it is an integer in [minimum, maximum] (None too when
    `optional`); 2.0, '2' and True are not integers here."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not minimum <= value <= maximum:
        raise error(f"{arg(name)} must be {_range(minimum, maximum)}, got {short(value)}")
    return int(value)


LENGTH_MAX = 2**62  # a length's aligned footprint (rounded up to a multiple) must fit in int64


def int_array(values, name: str, error: type[PacktoolError] = PacktoolInputError,
              what: str = "one length per sequence", maximum: int = LENGTH_MAX, at=None,
              minimum: int = 0) -> np.ndarray:
    """A 1-D int64 array of `values` (numpy arrays of int64 pass through uncopied): any other
    dtype (float, NaN, bool, object: Python ints beyond int64), a value above `maximum` (a
    uint64 above 2^63-1 too) or below `minimum` (1 where a sequence needs a token: the range
    said is then the one held) is refused, naming the argument, the first bad
    index and the range; `at(index, detail)`, when given, builds the error for a bad value
    (the planner's SequenceError, which a caller turns into its file's row)."""
    said = arg(name)
    span = f"integers from {minimum} to {_power(maximum)} ({what})"
    arr = np.asarray(values)
    if not isinstance(values, np.ndarray) and arr.dtype.kind in "fO" and arr.ndim == 1:
        _big_python_int(values, said, span, minimum, maximum, error, at)  # numpy made 10**19 a float
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise error(f"{said} must be a 1-D array of {span}, got {arr.dtype} of shape {arr.shape}: "
                    f"an integer cast would truncate floats and read booleans as 1")
    if not isinstance(values, np.ndarray) and arr.size:
        _bool_item(values, arr, said, span, error, at)
    if arr.size and (int(arr.max()) > maximum or int(arr.min()) < minimum):
        i = int(np.argmax(arr)) if int(arr.max()) > maximum else int(np.argmin(arr))
        if at is not None:
            raise at(i, f"{int(arr[i])} tokens, outside {minimum}..{_power(maximum)}: {said} takes {span}")
        raise error(f"{said}[{i}] is {int(arr[i])}: {said} takes {span}")
    return arr if arr.dtype == np.int64 else arr.astype(np.int64)


def _bool_item(values, arr: np.ndarray, said: str, span: str, error, at) -> None:
    """A list holding a bool (Python, numpy, a 0-d torch or numpy bool) among its ints: numpy
    makes the list int64, True read as 1, before the dtype test can see it. Only items that
    became 0 or 1 can be one, so no loop over the whole list."""
    for i in np.flatnonzero(arr <= 1).tolist():
        v = values[i]
        if isinstance(v, (bool, np.bool_)) or str(getattr(v, "dtype", "")) in ("bool", "torch.bool"):
            why = f"{said} takes {span}, and a cast would read it as {int(bool(v))}"
            if at is not None:
                raise at(i, f"a bool ({bool(v)}) for its length: {why}")
            raise error(f"{said}[{i}] is a bool ({bool(v)}): {why}")


def _big_python_int(values, said: str, span: str, minimum: int, maximum: int, error, at) -> None:
    """A list of Python ints, one beyond int64: numpy holds it as float64 or object; name the
    value, not the dtype numpy chose (on the error path only: a loop over the list)."""
    for i, v in enumerate(values):
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool) and not minimum <= v <= maximum:
            if at is not None:
                raise at(i, f"{short(v)} tokens, outside {minimum}..{_power(maximum)}: {said} takes {span}")
            raise error(f"{said}[{i}] is {short(v)}: {said} takes {span}")


def _power(n: int) -> str:
    """2^62, 2^63-1 as said; other bounds with thousands separators."""
    for k in range(31, 64):
        if n in (2**k, 2**k - 1):
            return f"2^{k}" if n == 2**k else f"2^{k}-1"
    return f"{n:,}"


__all__ = ["INT32_MAX", "INT64_MAX", "LENGTH_MAX", "TOKEN_ID_BOUND", "int_array", "int_value", "short"]
