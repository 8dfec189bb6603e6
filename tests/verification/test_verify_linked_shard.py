"""S34-8: verify said OK, with no word, for an output whose shard is a symbolic link (to a file
outside the folder), which `pack --overwrite` refuses to replace. The readers' rule (slabs/check.py)
follows links, so verify does too (no problem, the slabs are right), but every listed shard that is
a link is said in a note naming it and where it points: absolute or relative, outside the folder
or inside it, first or last shard."""
from __future__ import annotations

import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from packtool.align import Alignment
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig
from packtool.verification.run import verify


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    d = tmp_path_factory.mktemp("linked")
    rng = np.random.default_rng(3)
    ids = [rng.integers(1, 900, int(m)).tolist() for m in rng.integers(4, 30, 200)]
    pq.write_table(pa.table({"input_ids": pa.array(ids, pa.list_(pa.int32()))}), d / "in.parquet")
    out = d / "out"
    pack([str(d / "in.parquet")], Alignment(capacity=64), PackingConfig("bfd"), TokenizeConfig(shape="tokens"),
         output=str(out), cache_dir=str(d / "cache"), shard_tokens=1024)
    shards = sorted(n for n in os.listdir(out) if n.endswith(".parquet"))
    assert len(shards) >= 2
    return out, shards


LINKS = {
    "outside, absolute": lambda out, f: (out.parent / "kept" / f, str(out.parent / "kept" / f)),
    "outside, relative": lambda out, f: (out.parent / "kept" / f, os.path.join("..", "kept", f)),
    "inside the folder": lambda out, f: (out / f".{f}.real", f".{f}.real"),
}


def _linked(out, shards, tmp_path, which, how):
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    f = shards[0] if which == "first" else shards[-1]
    real, link = LINKS[how](copy, f)
    real.parent.mkdir(exist_ok=True)
    os.replace(copy / f, real)
    os.symlink(link, copy / f)
    return copy, f, real


@pytest.mark.parametrize("how", list(LINKS))
@pytest.mark.parametrize("which", ["first", "last"])
def test_a_linked_shard_is_said(packed, tmp_path, which, how):
    out, shards = packed
    copy, f, real = _linked(out, shards, tmp_path, which, how)
    report = verify(str(copy))
    assert report.ok, report.problems  # the slabs are right: readers follow the link
    said = [n for n in report.notes if f"shard {f} is a symbolic link" in n]
    assert len(said) == 1 and str(real) in said[0] and "pack --overwrite" in said[0]
    assert ("outside the output folder" in said[0]) == how.startswith("outside")
    assert not [n for n in report.notes if "symbolic link" in n and n not in said]


def test_plain_shards_say_nothing(packed):
    out, _ = packed
    assert not [n for n in verify(str(out)).notes if "symbolic link" in n]
