"""Plain O(n^2) Python transcriptions of each packer's definition, for the tests only.

Kept deliberately naive (lists, linear scans) so they share nothing with the numba code.
"""
from __future__ import annotations


def _desc(sizes):
    return sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))


def ffd_ref(sizes, C):
    rem, out = [], [None] * len(sizes)
    for i in _desc(sizes):
        for b, r in enumerate(rem):
            if r >= sizes[i]:
                break
        else:
            b = len(rem)
            rem.append(C)
        rem[b] -= sizes[i]
        out[i] = b
    return out


def bfd_ref(sizes, C):
    """Tightest bin that fits; ties: the bin placed into most recently."""
    rem, stamp, out = [], [], [None] * len(sizes)
    for t, i in enumerate(_desc(sizes)):
        fits = [b for b in range(len(rem)) if rem[b] >= sizes[i]]
        if fits:
            b = min(fits, key=lambda b: (rem[b], -stamp[b]))
        else:
            b = len(rem)
            rem.append(C)
            stamp.append(0)
        rem[b] -= sizes[i]
        stamp[b] = t + 1
        out[i] = b
    return out


def balanced_ref(sizes, C):
    """Least-loaded open bin if the item fits there, else a new bin; ties: the bin that has
    had that load longest (placed into least recently)."""
    rem, stamp, out = [], [], [None] * len(sizes)
    for t, i in enumerate(_desc(sizes)):
        b = max(range(len(rem)), key=lambda b: (rem[b], -stamp[b])) if rem else None
        if b is None or rem[b] < sizes[i]:
            b = len(rem)
            rem.append(C)
            stamp.append(0)
        rem[b] -= sizes[i]
        stamp[b] = t
        out[i] = b
    return out


def mffd_ref(sizes, U):
    """Johnson & Garey's phases, literally (see packtool/packers/mffd.py)."""
    order = _desc(sizes)
    A = [i for i in order if 2 * sizes[i] > U]
    B = [i for i in order if 3 * sizes[i] > U >= 2 * sizes[i]]
    Cc = [i for i in order if 6 * sizes[i] > U >= 3 * sizes[i]]
    out = [None] * len(sizes)
    rem = []
    for i in A:  # phase 1
        out[i] = len(rem)
        rem.append(U - sizes[i])
    has_b = [False] * len(A)
    for b in range(len(A)):  # phase 2: B is descending, so the first that fits is largest
        fit = [i for i in B if sizes[i] <= rem[b]]
        if fit:
            i = fit[0]
            B.remove(i)
            out[i] = b
            rem[b] -= sizes[i]
            has_b[b] = True
    for b in reversed(range(len(A))):  # phase 3
        if has_b[b] or len(Cc) < 2 or sizes[Cc[-1]] + sizes[Cc[-2]] > rem[b]:
            continue
        i = next(j for j in Cc if sizes[j] == sizes[Cc[-1]])  # smallest C, lowest index
        Cc.remove(i)
        out[i] = b
        rem[b] -= sizes[i]
        i = [j for j in Cc if sizes[j] <= rem[b]][0]  # largest that fits beside it
        Cc.remove(i)
        out[i] = b
        rem[b] -= sizes[i]
    rest = [i for i in order if out[i] is None]  # phases 4-5: bin by bin, largest first
    b = 0
    while rest:
        if b == len(rem):
            rem.append(U)
        for i in list(rest):
            if sizes[i] <= rem[b]:
                out[i] = b
                rem[b] -= sizes[i]
                rest.remove(i)
        b += 1
    return out


REFS = {"ffd": ffd_ref, "bfd": bfd_ref, "balanced": balanced_ref, "mffd": mffd_ref}
