"""S41-9: `SlabDataset.to_hf()`'s datasets cache (load_kwargs cache_dir, or the default
HF_DATASETS_CACHE) is a folder packtool's call fills, so it follows the rule of every path
packtool writes: never a packed output or one of packtool's own trees, nor inside one at any
depth. `to_hf(cache_dir='OUT/hfc')` returned the dataset, and the output then failed verify and
every consumer (a stray `hfc` in the folder). Refused in one line naming the key, before datasets
writes a byte: the output stays byte-identical and readable."""
from __future__ import annotations

import hashlib
import json
import os

import pytest

pytest.importorskip("torch")
datasets = pytest.importorskip("datasets", reason="the hf extra is not installed")

from slab_support import write_pack  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.errors import PacktoolError  # noqa: E402
from packtool.hf import SlabDataset  # noqa: E402
from packtool.output.leftovers import MARKER  # noqa: E402


def _cache_entry(root):
    d = os.path.join(root, "tokcache", "entry")
    os.makedirs(os.path.join(d, "data"))
    open(os.path.join(d, "cache.json"), "w").write("{}")
    return d


def _temporary(root):
    d = os.path.join(root, "tmpowned")
    os.makedirs(d)
    open(os.path.join(d, MARKER), "w").write("x")
    return d


PLACES = {  # name: the cache folder, from (output, root)
    "the output itself": lambda out, root: out,
    "inside the output": lambda out, root: os.path.join(out, "hfc"),
    "two levels inside": lambda out, root: os.path.join(out, "a", "b"),
    "inside, spelled with ..": lambda out, root: os.path.join(root, "x", "..", os.path.relpath(out, root), "hfc"),
    "inside another packed output": lambda out, root: os.path.join(write_pack(os.path.join(root, "q"), [30, 40],
                                                                              Alignment(capacity=64))[0], "c"),
    "inside a tokenized cache entry": lambda out, root: os.path.join(_cache_entry(root), "hf"),
    "inside a packtool temporary folder": lambda out, root: os.path.join(_temporary(root), "hf"),
}


def _tree(d):
    return {os.path.relpath(os.path.join(p, f), d): hashlib.sha256(open(os.path.join(p, f), "rb").read()).hexdigest()
            for p, _, fs in os.walk(d) for f in fs} | {os.path.relpath(p, d) + "/": "" for p, _, _ in os.walk(d)}


@pytest.fixture
def out(tmp_path):
    return write_pack(str(tmp_path / "p"), [40, 70, 90, 30, 100, 20, 60], Alignment(capacity=128),
                      shard_tokens=200)[0]


@pytest.mark.parametrize("how", ["load_kwargs", "HF_DATASETS_CACHE"])
@pytest.mark.parametrize("place", PLACES)
def test_a_datasets_cache_in_packtools_trees_is_refused_before_a_byte(out, tmp_path, monkeypatch, place, how):
    cache = PLACES[place](out, str(tmp_path))
    before = {d: _tree(d) for d in (out, str(tmp_path))}
    ds = SlabDataset(out)
    if how == "HF_DATASETS_CACHE":
        monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
        kw = {}
    else:
        kw = {"cache_dir": cache}
    with pytest.raises(PacktoolError) as e:
        ds.to_hf(**kw)
    msg = str(e.value)
    named = "load_kwargs['cache_dir']" if how == "load_kwargs" else "HF_DATASETS_CACHE"
    assert "\n" not in msg and named in msg and "write it beside that folder" in msg, msg
    assert e.value.__traceback__ is not None and e.value.__cause__ is None
    assert {d: _tree(d) for d in before} == before  # nothing written, nothing left
    assert len(SlabDataset(out)) > 0  # the output still opens


def test_the_findings_example_and_a_cache_beside_the_output(out, tmp_path):
    with pytest.raises(PacktoolError, match=r"inside a packed output folder.*load_kwargs\['cache_dir'\]"):
        SlabDataset(out).to_hf(cache_dir=os.path.join(out, "hfc"))
    assert not os.path.exists(os.path.join(out, "hfc"))
    beside = str(tmp_path / "hfc")
    assert len(SlabDataset(out).to_hf(cache_dir=beside)) == len(SlabDataset(out))
    from packtool.verification.run import verify
    assert verify(out, workers=1).ok, json.dumps(str(verify(out, workers=1)))
