"""Where an output's slabs are cut: into shards (`shard_ranges`) and each shard into row groups
(`group_ranges`, `side_group_tokens`). A function of the slabs alone, so the bytes never
depend on the machine or the engine: the local writer (slabs/writer.py), the spilled plan's
(slabs/routed.py) and Ray's (engines/ray_write.py) all cut here.
"""
from __future__ import annotations

import numpy as np


def group_ranges(slab_len: np.ndarray, budget: int) -> list[tuple[int, int]]:
    """Consecutive slab ranges of about `budget` tokens (at least one slab each)."""
    out, b0 = [], 0
    ends = np.cumsum(slab_len)
    n = slab_len.size
    while b0 < n:
        start = ends[b0 - 1] if b0 else 0
        b1 = int(np.searchsorted(ends, start + budget, side="right"))
        b1 = max(b1, b0 + 1)
        out.append((b0, b1))
        b0 = b1
    return out


SHARD_MULTIPLE = 4  # output shards come in multiples of this (see shard_ranges)
MIN_GROUP_TOKENS = 1 << 17


def side_group_tokens(group_tokens: int, side) -> int:
    """Tokens per row group with side columns: the same bytes per group as the token columns
    alone (5 bytes per token), at least MIN_GROUP_TOKENS. A 20-wide int32 column is 80 bytes
    per token, and Parquet holds a row group's repetition levels (4 bytes per value) while it
    encodes it: two writer threads at a million tokens each held ~1 GB."""
    extra = sum(c.width * c.np_dtype.itemsize for c in side)
    if not extra:
        return group_tokens
    return max(min(group_tokens, MIN_GROUP_TOKENS), group_tokens * 5 // (5 + extra))


GROUP_TOKENS = 1 << 20  # tokens per row group, every engine's default
MIN_SPLIT_TOKENS = 1 << 22  # below this, one shard


def shard_ranges(slab_len: np.ndarray, shard_tokens: int) -> list[tuple[int, int]]:
    """The output shards: runs of consecutive slabs of about equal size, none much over
    `shard_tokens`, and (above MIN_SPLIT_TOKENS) a multiple of SHARD_MULTIPLE of them. Shards
    are written one per thread, so 1, 2 or 4 writers (and as many DP readers) get equal work
    instead of one finishing a short last shard alone. A function of the slabs alone: the
    bytes never depend on the machine."""
    ends = np.cumsum(slab_len, dtype=np.int64)
    total = int(ends[-1]) if ends.size else 0
    n = max(1, -(-total // max(int(shard_tokens), 1)))
    if total >= MIN_SPLIT_TOKENS:
        n = -(-n // SHARD_MULTIPLE) * SHARD_MULTIPLE
    # shard k ends at the first slab that reaches k/n of the tokens
    cuts = np.searchsorted(ends, (np.arange(1, n) * total + n - 1) // n, side="left") + 1
    bounds = np.unique(np.concatenate(([0], np.minimum(cuts, ends.size), [ends.size])))
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
