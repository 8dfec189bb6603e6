"""Execution engines for `pack`: `local` (packtool.pack, one machine) and `ray` (Ray Data).

Both run the same readers, tokenization, planner and slab writer, so they write the same
bytes for the same input and config. `ray` needs the optional extra: `pip install packtool[ray]`.
"""
from __future__ import annotations

ENGINES = ("local", "ray")


def pack_ray(*args, **kwargs):
    """`packtool.pack.pack` on a Ray cluster; see packtool.engines.ray_engine.pack_ray."""
    from .ray_engine import pack_ray as _pack_ray
    return _pack_ray(*args, **kwargs)
