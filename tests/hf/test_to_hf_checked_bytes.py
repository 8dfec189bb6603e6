"""S46B-2: `SlabDataset.to_hf()` hashed every shard against the manifest, then handed out the
`datasets` cache's conversion of whatever file had been at that path with that mtime before
(datasets keys a local file by its path and mtime only): after another output landed in the
folder with the shards' mtimes kept (`cp -p`, `rsync -a`, `tar x`, a mount with coarse or fixed
mtimes), to_hf returned the first output's rows, with no word. The conversion is now named by the
checksums to_hf checked: its rows are always those of the bytes checked, and the same bytes
still convert once (a second call reuses the cache)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("torch")
datasets = pytest.importorskip("datasets", reason="the hf extra is not installed")

from slab_support import write_pack  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.hf import SlabDataset  # noqa: E402

LENGTHS = [40, 70, 90, 30, 100, 20, 60]


def _pack(root, seed):
    return write_pack(root, LENGTHS, Alignment(capacity=128), shard_tokens=200, seed=seed)[0]


def _landed(src, dst):
    """Output `src`'s files copied over `dst`'s, every file keeping the mtime dst's had."""
    for name in os.listdir(src):
        d = os.path.join(dst, name)
        st = os.stat(d)
        shutil.copyfile(os.path.join(src, name), d)
        os.utime(d, ns=(st.st_atime_ns, st.st_mtime_ns))


def _conversions(cache):
    """The conversion folders datasets wrote for the parquet builder (one per config id)."""
    base = os.path.join(cache, "parquet")
    return sorted(os.listdir(base)) if os.path.isdir(base) else []


# where the datasets cache lies: load_kwargs cache_dir, or HF_DATASETS_CACHE without it
PLACES = ("load_kwargs cache_dir", "HF_DATASETS_CACHE")
# load_dataset's keywords that change how the conversion is made or read, not which rows
LOADS = {"plain": {}, "keep_in_memory": {"keep_in_memory": True}}
# the views of the output whose rows to_hf hands out
VIEWS = {"whole": {}, "rank 1 of 2": {"rank": 1, "world_size": 2}}


def _rows(h):
    return [np.asarray(r) for r in h["input_ids"]]


def _check(tmp, place, kw, view):
    out, other = _pack(os.path.join(tmp, "a"), 0), _pack(os.path.join(tmp, "b"), 1)
    cache = os.path.join(tmp, "hfc")
    kw = dict(kw)
    if place == "HF_DATASETS_CACHE":
        datasets.config.HF_DATASETS_CACHE = cache
    else:
        kw["cache_dir"] = cache

    first = SlabDataset(out, **VIEWS[view])
    before = [first[i]["input_ids"].tolist() for i in range(len(first))]
    assert [a.tolist() for a in _rows(first.to_hf(**kw))] == before
    assert len(_conversions(cache)) == 1
    SlabDataset(out, **VIEWS[view]).to_hf(**kw)  # the same bytes: converted once, the cache reused
    assert len(_conversions(cache)) == 1

    _landed(other, out)
    ds = SlabDataset(out, **VIEWS[view])
    want = [ds[i]["input_ids"].tolist() for i in range(len(ds))]
    assert want != before  # the bytes did change
    assert [a.tolist() for a in _rows(ds.to_hf(**kw))] == want
    assert len(_conversions(cache)) == 2  # a conversion of the new bytes beside the old one


@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize("load", LOADS)
@pytest.mark.parametrize("place", PLACES)
def test_to_hf_hands_out_the_rows_of_the_bytes_it_checked(tmp_path, monkeypatch, place, load, view):
    # _check may set the datasets cache place; monkeypatch puts it back after the test
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", datasets.config.HF_DATASETS_CACHE)
    _check(str(tmp_path), place, LOADS[load], view)


# num_proc=2 makes datasets fork: forking a pytest-xdist worker (threads alive, one holding a
# lock) once hung the forked child for good in a whole-suite run (2026-12-05). A fresh
# interpreter with no other threads is what a user's script is; the timeout turns a hang into a
# failure here.
_CHILD = """
import importlib.util, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
spec = importlib.util.spec_from_file_location("checked_bytes", sys.argv[3])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
mod._check(sys.argv[4], sys.argv[5], {"num_proc": 2}, sys.argv[6])
"""


@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize("place", PLACES)
def test_to_hf_with_num_proc_hands_out_the_rows_of_the_bytes_it_checked(tmp_path, place, view):
    here = os.path.dirname(os.path.abspath(__file__))
    tests, repo = os.path.dirname(here), os.path.dirname(os.path.dirname(here))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    run = subprocess.run(
        [sys.executable, "-c", _CHILD, tests, repo, os.path.abspath(__file__), str(tmp_path), place, view],
        env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
