"""What a reader's refusal of a packed output says beside the problem itself (slabs.check's and
the reader's): where, for a slab found by the open scan (`slab_at`: its shard, row group and
row), and the fix (`fix_of`): open the output again when a later pack committed a new one on an
object store after this reader read its manifest (FORMAT.md, "Object storage"), else run
`packtool verify` for every problem and re-pack. `shard_gone`: a listed shard that vanished
after the open checks. slabs.check re-exports `shard_gone`.
"""
from __future__ import annotations

import numpy as np

from packtool.slabs.format import FormatError, SlabManifest, read_manifest
from packtool.errors import arg
from packtool.storage import bucket_gone, is_uri


def fix_of(sm: SlabManifest) -> str:
    if _replaced(sm):
        return (f"a later pack committed a new output at {sm.path} after this reader read its manifest: "
                f"open it again")
    return f"the output is damaged or edited: run `packtool verify {sm.path}` for every problem, re-run `packtool pack`"


def _replaced(sm: SlabManifest) -> bool:
    """An object-store output whose manifest changed since `sm` was read (FORMAT.md, "Object
    storage": a reader of the old manifest may find its shards deleted)."""
    if not is_uri(sm.path):
        return False
    try:
        return read_manifest(sm.path) != sm.raw
    except (FormatError, OSError):
        return False


def shard_gone(sm: SlabManifest, i: int) -> FormatError:
    """A listed shard that vanished after the open checks (a store output replaced meanwhile, or
    its bucket deleted)."""
    gone = bucket_gone(sm.shard_path(i))
    if gone is not None:
        return gone
    return FormatError(f"{sm.shard_path(i)}: {listed(sm)} but missing; {fix_of(sm)}")


def listed(sm: SlabManifest) -> str:
    """"listed in the manifest", naming the argument that gave a store output (its objects can go
    between the manifest's read and a shard's)."""
    return f"listed in the manifest that {arg(sm.argument)} names" if sm.argument else "listed in the manifest"


def slab_at(sm: SlabManifest, cat: dict[str, np.ndarray], i: int) -> str:
    """Slab i of the open scan (on-disk order) as its shard, row group and row (the output and
    the slab, where the scan holds no slab i)."""
    if not 0 <= i < cat["shard"].size:
        return f"{sm.path}: slab {i}"
    return f"{sm.shard_path(int(cat['shard'][i]))} row group {int(cat['row_group'][i])} row {int(cat['row'][i])}"
