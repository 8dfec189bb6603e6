"""Whether a cast of side values into their column's dtype keeps every value (FORMAT.md, "Side
columns"): the checks tokenize/side_values.py makes before it casts, so that a value the
dtype cannot hold is refused in one line (naming file, row, token, column, value and the
dtype that holds it), never changed silently and never left to a raw numpy warning."""
from __future__ import annotations

import numpy as np

from packtool.errors import arg
from packtool.side import SideColumn

__all__ = ["outside", "refuse_changed", "wider"]


def outside(x: np.ndarray, want: np.dtype) -> np.ndarray:
    """Where `x` (whole numbers) lies outside the int dtype `want`. Floats are compared with
    the bounds as powers of two, which every float holds exactly: numpy compares a float with
    iinfo.max rounded to the float (2^63 for int64, 2^31 for int32 from float32), so 2^63
    passed and the cast wrapped it to -2^63."""
    info = np.iinfo(want)
    if x.dtype.kind == "f":
        top = float(2 ** (info.bits - 1))
        return (x < -top) | (x >= top)
    return (x < info.min) | (x > info.max)


def refuse_changed(x: np.ndarray, y: np.ndarray, ok, c: SideColumn, bad, where) -> None:
    """A cast into a float column (`y` = `x` as c's dtype) keeps every value or is refused at
    the first it changes beyond the precision the dtype is (FORMAT.md, Side columns): a finite
    float that became +-inf (float32 ends at 3.4e38), or an integer the float holds only
    rounded (float32 holds every integer to 2^24, float64 to 2^53). Rounding a double to
    float32 is what pinning float32 asks for, so it is not refused. NaN and +-inf of the
    input are kept (and counted as the input's)."""
    if x.dtype.kind == "f":
        hit = np.isfinite(x) & ~np.isfinite(y)
        why = (f"beyond {c.dtype}'s largest value ({float(np.finfo(y.dtype).max):.8g}): the cast would make it "
               f"inf; give the column as {c.name}:float64 in {arg('side_columns')}")
    elif x.dtype.kind in "iu":
        hit = _inexact_ints(x, y)
        top = np.finfo(y.dtype).nmant + 1
        fix = f"{c.name}:float64 or {c.name}:int64" if y.dtype == np.float32 else f"{c.name}:int64"
        why = (f"which {c.dtype} holds only rounded (it holds every integer up to 2^{top}); give the column "
               f"as {fix} in {arg('side_columns')}")
    else:  # bool and float16 fit every float column exactly
        return
    if ok is not None:
        hit &= ok
    if hit.any():
        pos = int(np.flatnonzero(hit)[0])
        at = where(pos)
        v = x[pos].item()
        raise bad(f"token {at[1]} holds {v!r}, {why}", at, pin=True)


def _inexact_ints(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Where the integers `x` differ from `y`, their cast to a float dtype. Only values above
    the float's exact range are looked at again; one that rounded up to 2^(bits of x) (int64
    near its top) is inexact, and no other wraps when cast back."""
    hit = np.zeros(x.shape, bool)
    top = 2 ** (np.finfo(y.dtype).nmant + 1)
    if x.dtype.itemsize * 8 <= np.finfo(y.dtype).nmant + 1:
        return hit
    big = np.flatnonzero((x > top) | (x < -top))
    if not big.size:
        return hit
    yb = y[big].astype(np.float64)
    end = float(2 ** (x.dtype.itemsize * 8 - (x.dtype.kind == "i")))
    over = yb >= end
    hit[big] = over | (np.where(over, 0, yb).astype(x.dtype) != x[big])
    return hit

def wider(v: int, name: str) -> str:
    """The fix for an integer its column's dtype cannot hold: int64 when it fits there; above
    int64 (a uint64 >= 2^63) no side dtype holds it exactly, so say what can be done."""
    i64 = np.iinfo(np.int64)
    if i64.min <= v <= i64.max:
        return f"give the column as {name}:int64 in {arg('side_columns')}"
    return (f"no side column dtype holds it exactly (int64, the widest, ends at {i64.max}): write the "
            f"column as int64 in the input (shift or bit-cast the values), or give it as {name}:float64 "
            f"in {arg('side_columns')} if a value rounded to 53 bits will do")
