"""Warm numba's on-disk cache for every compiled path of packtool.online.

    python -m packtool.online.warmup          # once per image / machine, as the run user

A trainer's first `pack_step` in a fresh process then loads machine code from the cache
(~0.2 s for numba's own start) instead of compiling (seconds). Caches live next to the
package's sources (`__pycache__`) unless NUMBA_CACHE_DIR points elsewhere; they are keyed
by the CPU, so build the image with NUMBA_CPU_NAME=generic (set at run time too) when it
runs on other CPU models. See docs/ONLINE.md.
"""
from __future__ import annotations

import sys
import time

import numpy as np

from packtool.align import Alignment


def warm_cache(verbose: bool = False) -> float:
    """Compile (or load) every kernel signature packtool.online uses; returns seconds."""
    from packtool.online.microbatch import micro_batches
    from packtool.online.skyrl import make_seq_packer
    from packtool.online.step import StepPacker

    t0 = time.perf_counter()
    small = np.array([5, 3, 9, 9, 1, 7, 2, 8], np.int64)
    big = np.random.default_rng(0).integers(1, 100, 4096).astype(np.int64)  # counting sort
    align = Alignment(cp=2, capacity=64)
    for lens in (small, big):
        for alg in ("ffd", "least-loaded", "bfd", "mffd", "balanced"):
            for moves in ("balance", "skyrl"):
                b = StepPacker(align, algorithm=alg, dp=2, moves=moves,
                               oversize="singleton").pack(lens)
                b.rank, b.footprint  # noqa: B018 - the lazy figures
        for alg in ("first_fit_decreasing", "balanced"):
            make_seq_packer(alg, 100, 2, 2).pack(lens)
        for order in ("keep", "least-loaded", "ffd"):
            micro_batches(lens, align, 64, np.array([0, 3, lens.size]), order=order)
    dt = time.perf_counter() - t0
    if verbose:
        print(f"packtool.online: kernels ready in {dt:.2f} s", file=sys.stderr)
    return dt


if __name__ == "__main__":
    warm_cache(verbose=True)
