"""A `datasets.Dataset` is packed as `ds[i]` shows it (packtool/tokenize/hf_format.py, S46A-1):
a transform (`set_transform`, `with_transform`) is applied, never dropped for the stored
column, and such a Dataset is never reused from the cache (its function has no content to key
by). The class: every way a Dataset comes (saved and mapped, in memory, after select, a DatasetDict's
split), both transform doors and both entries that take objects (pack, tokenize_to_cache)."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import GPT2
from test_arrow_ingest import shard_digests

from packtool.align import Alignment
from packtool.errors import PacktoolInputError
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.tokenize import tokenize_to_cache
from packtool.tokenize.config import TokenizeConfig

datasets = pytest.importorskip("datasets", reason="the hf extra (datasets) is not installed")
datasets.disable_progress_bars()

TEXTS = [f"alpha beta gamma {i}" for i in range(7)]
CFG = TokenizeConfig(tokenizer=GPT2, add_bos=False, batch_size=3)  # batches cut mid-dataset


def _upper(b):
    return {"text": [t.upper() for t in b["text"]]}


def _zzz(b):
    return {"text": ["zzz " + t for t in b["text"]]}


def _made(tmp_path, how: str):
    """(the dataset as `how` makes it, the split to pass): the stored rows are TEXTS."""
    if how == "saved":
        datasets.Dataset.from_dict({"text": TEXTS}).save_to_disk(str(tmp_path / "saved"))
        return datasets.load_from_disk(str(tmp_path / "saved")), None
    ds = datasets.Dataset.from_dict({"text": TEXTS})
    if how == "selected":
        return ds.select(range(len(TEXTS) - 1, -1, -1)), None  # an indices mapping, reversed
    if how == "dict":
        return datasets.DatasetDict({"train": ds, "test": ds.select([0])}), "train"
    return ds, None


def _with(obj, door: str, fn):
    if door == "set_transform":
        obj.set_transform(fn)
        return obj
    return obj.with_transform(fn)


def _shown(obj, split):
    """A plain Dataset of the rows `ds[i]` shows: what must be packed."""
    ds = obj[split] if split else obj
    return datasets.Dataset.from_dict({k: list(v) for k, v in ds[:].items()})


def _pack(obj, tmp_path, name, split=None, cache="cache"):
    out = str(tmp_path / f"out-{name}")
    pack(obj, Alignment(capacity=64), PackingConfig(), CFG, out, cache_dir=str(tmp_path / cache), split=split)
    return shard_digests(out)


HOWS = ["saved", "in_memory", "selected", "dict"]
DOORS = ["set_transform", "with_transform"]


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("how", HOWS)
def test_pack_packs_the_transformed_rows(tmp_path, how, door):
    obj, split = _made(tmp_path, how)
    obj = _with(obj, door, _upper)
    plain, _ = _made(tmp_path / "plain", how)
    want = _pack(_shown(obj, split), tmp_path, "want")
    assert want != _pack(plain, tmp_path, "plain", split)  # the transform changes what is packed
    assert _pack(obj, tmp_path, "got", split) == want


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("how", HOWS)
def test_tokenize_to_cache_reads_the_transformed_rows(tmp_path, how, door):
    obj, split = _made(tmp_path, how)
    obj = _with(obj, door, _zzz)
    src = obj[split] if split else obj
    got = tokenize_to_cache(src, CFG, cache_dir=str(tmp_path / "c1"), progress=False)
    want = tokenize_to_cache(_shown(obj, split), CFG, cache_dir=str(tmp_path / "c2"), progress=False)
    assert _tokens(got) == _tokens(want)


def _tokens(cache):
    rows = cache.read_rows(np.arange(cache.num_rows))
    return rows.input_ids.tolist(), rows.loss_mask.tolist(), rows.offsets.tolist()


@pytest.mark.parametrize("how", HOWS)
def test_another_transform_on_the_same_data_is_not_the_cached_one(tmp_path, how):
    """One cache folder, the same stored rows, two transforms: each packs its own rows."""
    first, split = _made(tmp_path, how)
    a = _pack(_with(first, "with_transform", _upper), tmp_path, "a", split, cache="shared")
    second, split = _made(tmp_path / "again", how)
    b = _pack(_with(second, "with_transform", _zzz), tmp_path, "b", split, cache="shared")
    assert a != b
    assert b == _pack(_shown(_with(_made(tmp_path / "ref", how)[0], "with_transform", _zzz), split),
                      tmp_path, "ref")


def test_a_transform_over_some_columns_keeps_the_others_when_asked(tmp_path):
    ds = datasets.Dataset.from_dict({"text": TEXTS, "other": list(range(7))})
    ds.set_transform(_upper, columns=["text"], output_all_columns=True)
    assert _pack(ds, tmp_path, "got") == _pack(_shown(ds, None), tmp_path, "want")


@pytest.mark.parametrize("fn, words", [
    (lambda b: {"text": b["text"][:1]}, "rows for the"),                        # drops rows
    (lambda b: (_ for _ in ()).throw(KeyError("nope")), "failed on the batch"),  # raises
    (lambda b: {"text": b["text"]} if len(b["text"]) == 1 else {"t": b["text"]}, "same columns"),
    (lambda b: ["x"] * len(b["text"]), "not a dict"),
    (lambda b: {"text": [object()] * len(b["text"])}, "Arrow cannot hold"),
])
def test_a_transform_packtool_cannot_read_is_refused_in_one_line(tmp_path, fn, words):
    ds = datasets.Dataset.from_dict({"text": TEXTS}).with_transform(fn)
    with pytest.raises(PacktoolInputError) as e:
        _pack(ds, tmp_path, "x")
    msg = str(e.value)
    assert "\n" not in msg and words in msg and "transform" in msg, msg
