"""Execution engines for `pack` beyond the local one: `ray` (Ray Data).

The local engine is `packtool.packing`; this package holds only Ray. Both run the same readers, tokenization, planner and slab writer, so they write the same
bytes for the same input and config. `ray` needs the optional extra: `pip install packtool[ray]`.
"""
from __future__ import annotations

__all__ = ["pack_ray"]


def pack_ray(*args, **kwargs):
    """`packtool.packing.pack` on a Ray cluster; see packtool.engines.ray_engine.pack_ray."""
    from packtool.engines.ray_engine import pack_ray as _pack_ray
    return _pack_ray(*args, **kwargs)
