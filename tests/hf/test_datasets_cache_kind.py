"""RB-9: the datasets cache to_hf converts into (load_kwargs cache_dir, or HF_DATASETS_CACHE) was
three kinds by door: placed inside a packed output or not a folder, kind config (the environment's
or the caller's setting, output/datasets_cache's rule); a file on the way that datasets cannot
write below, kind output; its conversion changed since it was made, kind cache (the README's cache
is --cache-dir / PACKTOOL_CACHE_DIR). A caller dispatching on kind saw one setting as three. Every
door now says it as kind config, naming the place."""
from __future__ import annotations

import glob
import os

import pytest

pytest.importorskip("torch")
datasets = pytest.importorskip("datasets", reason="the hf extra is not installed")

from slab_support import write_pack  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.errors import PacktoolError  # noqa: E402
from packtool.hf import SlabDataset  # noqa: E402


def _a_file(tmp_path, out):
    (tmp_path / "afile").write_text("mine\n")
    return str(tmp_path / "afile")


def _below_a_file(tmp_path, out):
    return os.path.join(_a_file(tmp_path, out), "sub")


def _inside_the_output(tmp_path, out):
    return os.path.join(out, "hfc")


def _changed_since(tmp_path, out):
    cache = str(tmp_path / "hfc")
    SlabDataset(out).to_hf(cache_dir=cache)
    SlabDataset(out).to_hf(cache_dir=cache)  # reused: its record written
    (arrow,) = glob.glob(os.path.join(cache, "parquet", "packtool-*", "**", "parquet-train*.arrow"), recursive=True)
    with open(arrow, "r+b") as f:
        f.seek(os.path.getsize(arrow) - 8)
        f.write(b"\xff" * 8)
    return cache


PLACES = {"a file": _a_file, "below a file": _below_a_file, "inside the output": _inside_the_output,
          "its conversion changed since": _changed_since}


@pytest.mark.parametrize("how", ["load_kwargs cache_dir", "HF_DATASETS_CACHE"])
@pytest.mark.parametrize("place", PLACES)
def test_the_datasets_cache_is_one_kind_by_every_door(tmp_path, monkeypatch, place, how):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", datasets.config.HF_DATASETS_CACHE)
    out = write_pack(str(tmp_path / "p"), [40, 70, 90, 30, 100], Alignment(capacity=128), shard_tokens=200)[0]
    cache = PLACES[place](tmp_path, out)
    kw = {"cache_dir": cache}
    if how == "HF_DATASETS_CACHE":
        datasets.config.HF_DATASETS_CACHE = cache
        kw = {}
    with pytest.raises(PacktoolError) as e:
        SlabDataset(out).to_hf(**kw)
    text = str(e.value)
    assert e.value.kind == "config" and "\n" not in text, (type(e.value).__name__, text)
