"""S46B-8: an output replaced (`pack --overwrite`, a manifest rewritten) after `SlabDataset`
read its manifest and `to_hf()` hashed every shard, but before or while `datasets` loaded the
shards: to_hf returned the new output's rows, never checked by this call, rc 0 (or, when the
slab counts differed, blamed the user's `cache_dir` keyword for datasets' IndexError), and the
new rows stayed in the datasets cache under the checked output's name. Now to_hf holds the
output to the state it read (packtool.output.unchanged, the slab readers' own check) after
datasets' load and on any failure of it: one line saying the output changed while it was read
and to open it again, and the conversion this call wrote is not left in the cache."""
from __future__ import annotations

import os

import pytest

pytest.importorskip("torch")
datasets = pytest.importorskip("datasets", reason="the hf extra is not installed")

import packtool.hf.load as load  # noqa: E402
from packtool.errors import PacktoolError  # noqa: E402
from packtool.hf import SlabDataset  # noqa: E402
from replaced_support import MOMENTS, arm, two_outputs  # noqa: E402

# where the datasets cache lies: load_kwargs cache_dir, or HF_DATASETS_CACHE without it
PLACES = ("load_kwargs cache_dir", "HF_DATASETS_CACHE")
# load_dataset's keywords that change how the conversion is kept, not which rows
LOADS = {"plain": {}, "keep_in_memory": {"keep_in_memory": True}}


def _conversions(cache) -> list[str]:
    """Every conversion folder datasets holds for the parquet builder (name/version/config id)."""
    base = os.path.join(cache, "parquet")
    out = []
    for root, dirs, _ in os.walk(base):
        if os.path.relpath(root, base).count(os.sep) == 1:  # name/version: its folders are conversions
            out += [os.path.join(root, d) for d in dirs]
    return sorted(out)


def _kwargs(tmp_path, monkeypatch, place, load_):
    cache = str(tmp_path / "hfc")
    kw = dict(LOADS[load_])
    if place == "HF_DATASETS_CACHE":
        monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    else:
        kw["cache_dir"] = cache
    return cache, kw


@pytest.mark.parametrize("load_", LOADS)
@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("moment", MOMENTS)
def test_to_hf_refuses_an_output_replaced_before_datasets_loaded_it(tmp_path, monkeypatch, moment, place, load_):
    a, b = two_outputs(tmp_path)
    cache, kw = _kwargs(tmp_path, monkeypatch, place, load_)
    ds = SlabDataset(a)
    arm(monkeypatch, load, "load_shards", a, b, moment)
    with pytest.raises(PacktoolError) as e:
        ds.to_hf(**kw)
    msg = str(e.value)
    assert "\n" not in msg and "the output changed while it was read" in msg and "open it again" in msg, msg
    assert "load_kwargs" not in msg and "cache_dir" not in msg and msg.count(a) == 1, msg
    if moment == "swap by a locked pack":
        assert "pid 4242" in msg, msg
    assert _conversions(cache) == []  # nothing of either output kept under the checked output's name


@pytest.mark.parametrize("place", PLACES)
def test_an_earlier_conversion_is_kept_when_a_later_read_is_refused(tmp_path, monkeypatch, place):
    """The conversion removed is only the one this call wrote: an earlier, checked one stays."""
    a, b = two_outputs(tmp_path)
    cache, kw = _kwargs(tmp_path, monkeypatch, place, "plain")
    SlabDataset(a).to_hf(**kw)
    kept = _conversions(cache)
    assert len(kept) == 1
    again = SlabDataset(a)
    arm(monkeypatch, load, "load_shards", a, b, "swap after the shards")
    with pytest.raises(PacktoolError, match="the output changed while it was read"):
        again.to_hf(**kw)
    assert _conversions(cache) == kept


@pytest.mark.parametrize("place", PLACES)
def test_an_untouched_output_loads_and_keeps_its_conversion(tmp_path, monkeypatch, place):
    a, _ = two_outputs(tmp_path)
    cache, kw = _kwargs(tmp_path, monkeypatch, place, "plain")
    ds = SlabDataset(a)
    h = ds.to_hf(**kw)
    assert [list(r) for r in h["input_ids"]] == [ds[i]["input_ids"].tolist() for i in range(len(ds))]
    assert len(_conversions(cache)) == 1
