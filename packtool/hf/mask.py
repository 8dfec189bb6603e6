"""The explicit [1, 1, T, T] block-diagonal causal mask of `packtool.hf.SlabCollator(mask_4d=True)`,
bounded (issue 23 class 3): its T x T elements grow with the square of the batch's tokens
(a 60,000-token slab: 14 GB in float32, per batch, per DataLoader worker), so a mask that
cannot fit in half of the memory this process may still take is one line naming `mask_4d`
with the estimate, before anything is allocated; an allocation that fails all the same (other
workers, other processes) says the same, not torch's allocator text."""
from __future__ import annotations

from typing import Any

import numpy as np

from packtool.errors import PacktoolConfigError, arg
from packtool.planning.bounds import SHARE, available_bytes
from packtool.tokenize.long_rows import room


def room_bytes() -> int | None:
    """The memory a mask may draw on: what the machine has available, within the limits an
    allocation fails at (ulimit -v/-d, overcommit: tokenize.long_rows.room owns them)."""
    limit = room()
    known = [b for b in (available_bytes(), limit[0] if limit else None) if b is not None]
    return max(min(known), 0) if known else None


def _refusal(t: int, dtype, need: int, have: int | None) -> PacktoolConfigError:
    over = (f"over half the {have / 2 ** 30:.1f} GiB this process can still take" if have is not None
            else "more than this process could allocate")
    return PacktoolConfigError(
        f"SlabCollator: mask_4d for a {t:,}-token batch needs {need / 2 ** 30:.1f} GiB ({str(dtype).replace('torch.', '')} "
        f"[1, 1, T, T], growing with T squared), {over}: use flash attention (mask_4d=False), fewer slabs per "
        f"batch, or pack with a smaller {arg('capacity')} (tokens a slab holds)")


_TEMP_ELEMENTS = 1 << 22  # booleans in one band of rows (4 MiB)


def block_causal_mask(seg: np.ndarray, dtype) -> Any:
    """[1, 1, T, T] additive mask: 0 where query i may see key j (same segment, j <= i),
    the dtype's minimum elsewhere (what eager adds and sdpa accepts). `seg` is the segment
    of each position, non-decreasing. The mask itself is the only T x T allocation: it is
    filled a band of rows at a time (one vectorized step per band, not one per segment)."""
    import torch
    seg = np.asarray(seg)
    t = int(seg.size)
    need = t * t * torch.empty((), dtype=dtype).element_size()
    have = room_bytes()
    if have is not None and need > SHARE * have:
        raise _refusal(t, dtype, need, have)
    try:
        m = torch.full((t, t), torch.finfo(dtype).min, dtype=dtype)
    except (RuntimeError, MemoryError):  # torch's "DefaultCPUAllocator: can't allocate memory"
        raise _refusal(t, dtype, need, None) from None
    seg_t = torch.as_tensor(seg.astype(np.int64, copy=False))
    pos = torch.arange(t)
    # A band of whole rows per step: the booleans beside the mask stay two bands (8 MiB) whatever
    # T is, so the estimate above stays the mask itself; a batch under 2,048 tokens is one step.
    rows = max(1, _TEMP_ELEMENTS // max(t, 1))
    for a in range(0, t, rows):
        b = min(a + rows, t)
        see = torch.eq(seg_t[a:b, None], seg_t[None, :])
        see &= pos[None, :] <= pos[a:b, None]
        m[a:b].masked_fill_(see, 0)  # same segment, key at or before the query
    return m[None, None]


__all__ = ["block_causal_mask", "room_bytes"]
