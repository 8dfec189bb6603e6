"""Bin packers over footprints (docs/DESIGN.md §3) and the data-parallel assignment.

Packers see only integer footprints and a capacity -- never tp/cp/fp8 -- and return one
bin id per item, bins numbered 0..B-1 in the order they were opened, deterministically
(items sorted by size descending, ties by input index). Each algorithm is what its name
says: no packer returns the better of two algorithms or splits items to fill gaps.
"""
from __future__ import annotations

import importlib

import numpy as np

from packtool.errors import PacktoolConfigError, PacktoolInputError, arg, bad_choice

ALGORITHMS = ("ffd", "bfd", "mffd", "balanced")

# The kernels (numba) load on first use: a reader of packed output validates its manifest's
# settings against ALGORITHMS and never packs, so it never pays numba's start
_LAZY = {"ffd": "packtool.packers.ffd", "bfd": "packtool.packers.bfd", "mffd": "packtool.packers.mffd",
         "balanced": "packtool.packers.balanced", "ATTN_COEF": "packtool.packers.dp",
         "DPAssignment": "packtool.packers.dp", "DPError": "packtool.packers.dp", "assign_dp": "packtool.packers.dp"}

__all__ = ["ALGORITHMS", "ATTN_COEF", "DPAssignment", "DPError", "assign_dp", "pack_items",
           "ffd", "bfd", "mffd", "balanced"]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'packtool.packers' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def pack_items(sizes: np.ndarray, capacity: int, algorithm: str) -> np.ndarray:
    """Bin id (int64) per item; bins numbered 0..B-1 in opening order; deterministic.

    sizes: integer footprints with 1 <= size <= capacity (the caller applies the overflow
    policy first). An int64 contiguous array is used as is (no copy)."""
    if algorithm not in ALGORITHMS:
        raise bad_choice(PacktoolConfigError, "algorithm", algorithm, ALGORITHMS)
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 1:
        raise PacktoolConfigError(f"{arg('capacity')} must be a positive integer, got {capacity!r}")
    capacity = int(capacity)
    sizes = np.asarray(sizes)
    if sizes.ndim != 1 or (sizes.size and not np.issubdtype(sizes.dtype, np.integer)):
        raise PacktoolInputError(f"sizes must be a 1-D integer array, got {sizes.dtype} {sizes.shape}")
    sizes = np.ascontiguousarray(sizes, dtype=np.int64)
    if sizes.size:
        lo, hi = int(sizes.min()), int(sizes.max())
        if lo < 1 or hi > capacity:
            bad = int(np.flatnonzero((sizes < 1) | (sizes > capacity))[0])
            raise PacktoolInputError(
                f"sizes[{bad}] = {int(sizes[bad])} is outside 1..{capacity}: footprints must "
                f"be positive and at most the capacity; apply an overflow policy "
                f"(split, truncate, singleton) before packing")
    return __getattr__(algorithm)(sizes, capacity)
