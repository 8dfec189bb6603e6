"""An output replaced while a command reads it (S41-2), shared by verify's and inspect's race tests:
two packed outputs, and `arm`, which makes a reading function of the command replace the first by
the second (or rewrite its manifest in place) at one moment of the read."""
from __future__ import annotations

import json
import os

import numpy as np
from slab_support import write_pack

from packtool.align import Alignment
from packtool.output.lock import lock_file
from packtool.slabs.names import MANIFEST

ALIGN = Alignment(cp=2, capacity=256)
# "to fewer shards" (S45B-3): a listed shard gone, not only changed (FileNotFoundError in verify's pass)
MOMENTS = ["swap before the shards", "swap after the shards", "manifest rewritten", "swap by a locked pack",
           "swap to fewer shards"]


def two_outputs(tmp_path) -> tuple[str, str]:
    a, _ = write_pack(str(tmp_path / "a"), np.arange(5, 250, 7), ALIGN, seed=0)
    b, _ = write_pack(str(tmp_path / "b"), np.arange(9, 250, 5), ALIGN, seed=3)
    small, _ = write_pack(str(tmp_path / "c"), [5, 9], ALIGN, seed=4)  # one shard: `smaller(b)`
    assert len(os.listdir(a)) > len(os.listdir(small)) == 2
    return a, b


def smaller(b: str) -> str:
    """The one-shard output two_outputs made beside `b`."""
    return os.path.join(os.path.dirname(os.path.dirname(b)), "c", "packed")


def tree(d) -> dict[str, bytes]:
    out = {}
    for root, _, names in os.walk(d):
        for n in names:
            p = os.path.join(root, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, d)] = f.read()
    return out


def swap(a, b):
    os.rename(a, a + ".old")
    os.rename(b, a)


def _rewrite_manifest(a):
    tmp = os.path.join(a, MANIFEST + ".tmp")
    with open(os.path.join(a, MANIFEST)) as f:
        man = json.load(f)
    with open(tmp, "w") as f:
        json.dump(man, f, indent=1)  # same content, a new file: what an atomic rewrite leaves
    os.replace(tmp, os.path.join(a, MANIFEST))


def arm(monkeypatch, module, name: str, a: str, b: str, moment: str) -> None:
    """`module.name`, the function that reads the shards, replaces `a` by `b` at `moment`."""
    real = getattr(module, name)

    def reads(*args, **kw):
        if moment == "swap after the shards":
            res = real(*args, **kw)
            swap(a, b)
            return res
        if moment == "manifest rewritten":
            _rewrite_manifest(a)
        else:
            swap(a, smaller(b) if moment == "swap to fewer shards" else b)
            if moment == "swap by a locked pack":
                with open(lock_file(os.path.realpath(a)), "wb") as f:
                    f.write(b"packtool lock, pid 4242, pack\n")
        return real(*args, **kw)
    monkeypatch.setattr(module, name, reads)
