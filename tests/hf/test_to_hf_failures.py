"""S40-2: `SlabDataset.to_hf()` calls into `datasets` (load_dataset, select) and fsspec; every
failure there is packtool's own error in one line naming the argument (`load_kwargs` and its
key) and the location (the shard, the cache folder, the output). They reached the user as
datasets' and Python's own: TypeError "got multiple values for keyword argument 'split'",
FileNotFoundError "Unable to find" for a shard removed after packtool's checks,
DatasetGenerationError over an ArrowInvalid for one damaged then, FileExistsError for a cache
folder that is a file, ZeroDivisionError for num_proc=0."""
from __future__ import annotations

import os
import shutil

import pytest

pytest.importorskip("torch")
datasets = pytest.importorskip("datasets", reason="the hf extra is not installed")

from slab_support import write_pack  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.errors import PacktoolConfigError, PacktoolError, PacktoolInputError  # noqa: E402
from packtool.hf import SlabDataset  # noqa: E402


@pytest.fixture
def out(tmp_path):
    return write_pack(str(tmp_path / "p"), [40, 70, 90, 30, 100, 20, 60], Alignment(capacity=128),
                      shard_tokens=200)[0]


def _shard(out) -> str:
    return os.path.join(out, sorted(n for n in os.listdir(out) if n.endswith(".parquet"))[1])


def _removed(p):
    os.unlink(p)


def _truncated(p):
    with open(p, "r+b") as f:
        f.truncate(100)


def _a_folder(p):
    os.unlink(p)
    os.mkdir(p)


# the keywords: (load_kwargs, the error type, what the line names besides load_kwargs)
KWARGS = {
    "split (to_hf's own)": (dict(split="test"), PacktoolConfigError, "split='test'"),
    "name (to_hf's own)": (dict(name="mine"), PacktoolConfigError, "name='mine'"),
    "data_files (to_hf's own)": (dict(data_files=["x.parquet"]), PacktoolConfigError, "data_files="),
    "data_dir (to_hf's own)": (dict(data_dir="elsewhere"), PacktoolConfigError, "data_dir="),
    "columns (to_hf's own)": (dict(columns=["input_ids"]), PacktoolConfigError, "columns="),
    "an unknown keyword": (dict(no_such_keyword=1), PacktoolConfigError, "no_such_keyword=1"),
    "a bad value": (dict(download_mode="sometimes"), PacktoolConfigError, "download_mode='sometimes'"),
    "num_proc=0": (dict(num_proc=0), PacktoolConfigError, "num_proc=0"),
    "num_proc=-2": (dict(num_proc=-2), PacktoolConfigError, "num_proc=-2"),
    "cache_dir a file": (dict(cache_dir="FILE"), PacktoolConfigError, "cache_dir"),
}
# a shard changed after packtool's checks, before datasets reads it (another run's --overwrite)
SHARDS = {"removed": _removed, "truncated": _truncated, "replaced by a folder": _a_folder}


def _one_line(e: PacktoolError) -> str:
    text = str(e)
    assert "\n" not in text and "Traceback" not in text, text
    return text


@pytest.mark.parametrize("kind", KWARGS)
def test_a_keyword_datasets_refuses_is_one_line_naming_it(out, tmp_path, kind):
    kwargs, cls, named = KWARGS[kind]
    if kwargs.get("cache_dir") == "FILE":
        (tmp_path / "cache_file").write_text("mine\n")
        kwargs = dict(cache_dir=str(tmp_path / "cache_file"))
    else:
        kwargs = dict(kwargs, cache_dir=str(tmp_path / "hf")) if "cache_dir" not in kwargs else kwargs
    with pytest.raises(cls) as e:
        SlabDataset(out).to_hf(**kwargs)
    text = _one_line(e.value)
    assert "load_kwargs" in text and named in text, text
    assert e.value.flag == "load_kwargs", text
    if kind == "cache_dir a file":
        assert str(tmp_path / "cache_file") in text and (tmp_path / "cache_file").read_text() == "mine\n"


@pytest.mark.parametrize("how", SHARDS)
def test_a_shard_changed_after_the_checks_is_one_line_naming_it(out, tmp_path, monkeypatch, how):
    shard = _shard(out)
    real = datasets.load_dataset

    def damaged_first(*a, **k):  # another run, between packtool's checks and datasets' read
        SHARDS[how](shard)
        return real(*a, **k)

    monkeypatch.setattr(datasets, "load_dataset", damaged_first)
    with pytest.raises(PacktoolInputError) as e:
        SlabDataset(out).to_hf(cache_dir=str(tmp_path / "hf"))
    text = _one_line(e.value)
    assert e.value.path == shard and os.path.basename(shard) in text and "packtool verify" in text, text


def test_load_kwargs_with_streaming_are_refused_not_ignored(out, tmp_path):
    with pytest.raises(PacktoolConfigError) as e:
        SlabDataset(out).to_hf(streaming=True, cache_dir=str(tmp_path / "hf"))
    text = _one_line(e.value)
    assert "load_kwargs cache_dir would be ignored" in text and out in text, text
    assert not os.path.exists(tmp_path / "hf")


def test_good_keywords_still_load(out, tmp_path):
    t = SlabDataset(out).to_hf(cache_dir=str(tmp_path / "hf"), keep_in_memory=True)
    assert len(t) == len(SlabDataset(out))
    shutil.rmtree(tmp_path / "hf", ignore_errors=True)
