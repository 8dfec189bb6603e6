"""An object input backed by files (a `datasets.Dataset` from `load_from_disk` or a cache file,
a `pyarrow.dataset` over files) is keyed by those files' content, as the CLI keys a file: data
rewritten in place under the same fingerprint, size and mtime is a new cache key, never the old
tokens (S44-15). So is a Dataset made from one in memory (S45A-1): keyed by the content it holds,
never by datasets' `_fingerprint`, which is derived from the same unchanged state.json."""
from __future__ import annotations

import glob
import os
import shutil

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from test_arrow_ingest import list_array, shard_digests

from packtool.align import Alignment
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig

datasets = pytest.importorskip("datasets", reason="the hf extra (datasets) is not installed")
datasets.disable_progress_bars()

OLD = [[1, 2, 3, 4], [5, 6, 7], [8, 9]]
NEW = [[11, 12, 13, 14], [15, 16, 17], [18, 19]]  # same lengths: the same file size


def _saved(tmp_path, name, ids):
    datasets.Dataset.from_dict({"input_ids": ids}).save_to_disk(str(tmp_path / name))
    return glob.glob(str(tmp_path / name / "data-*.arrow"))[0]


def _parquet(tmp_path, name, ids):
    path = str(tmp_path / name / "p.parquet")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(pa.table({"input_ids": list_array(ids)}), path, compression="none", use_dictionary=False)
    return path


def _same(row):
    return {"input_ids": row["input_ids"]}


def _all(row):
    return True


# name -> (write the data file, open the object over the folder that holds it)
KINDS = {
    "load_from_disk": (_saved, lambda d: datasets.load_from_disk(d)),
    "load_from_disk after select": (_saved, lambda d: datasets.load_from_disk(d).select([2, 0, 1])),
    "DatasetDict from load_from_disk": (
        _saved, lambda d: datasets.DatasetDict({"train": datasets.load_from_disk(d)})),
    # made from one in memory: no cache_files left, and datasets' _fingerprint derived from
    # state.json's, unchanged (S45A-1)
    "load_from_disk keep_in_memory": (_saved, lambda d: datasets.load_from_disk(d, keep_in_memory=True)),
    "map keep_in_memory": (_saved, lambda d: datasets.load_from_disk(d).map(_same, keep_in_memory=True)),
    "filter keep_in_memory": (_saved, lambda d: datasets.load_from_disk(d).filter(_all, keep_in_memory=True)),
    "flatten_indices keep_in_memory": (
        _saved, lambda d: datasets.load_from_disk(d).select([2, 0, 1]).flatten_indices(keep_in_memory=True)),
    "concatenate of a map keep_in_memory": (_saved, lambda d: datasets.concatenate_datasets(
        [datasets.load_from_disk(d).map(_same, keep_in_memory=True)])),
    "DatasetDict of a map keep_in_memory": (
        _saved, lambda d: datasets.DatasetDict({"train": datasets.load_from_disk(d).map(_same, keep_in_memory=True)})),
    "pyarrow.dataset": (_parquet, lambda d: pads.dataset(os.path.join(d, "p.parquet"))),
    "pyarrow.dataset folder": (_parquet, lambda d: pads.dataset(d)),
    # paths relative to its own file system, not this process's: read through it
    "pyarrow.dataset on another filesystem": (_parquet, lambda d: pads.dataset(
        "p.parquet", filesystem=pafs.SubTreeFileSystem(d, pafs.LocalFileSystem()))),
}


def _pack(obj, out, cache_dir, split=None):
    pack(obj, Alignment(capacity=64), PackingConfig("bfd"), TokenizeConfig(shape="tokens"), out,
         cache_dir=cache_dir, split=split, progress=False)
    return shard_digests(out)


@pytest.mark.parametrize("kind", KINDS)
def test_data_rewritten_in_place_is_a_new_key(kind, tmp_path):
    write, open_ = KINDS[kind]
    split = "train" if kind.startswith("DatasetDict") else None
    data = write(tmp_path, "a", OLD)
    new = write(tmp_path, "b", NEW)
    assert os.path.getsize(data) == os.path.getsize(new)
    folder = os.path.dirname(data)
    cache = str(tmp_path / "cache")
    old = _pack(open_(folder), str(tmp_path / "o1"), cache, split)
    st = os.stat(data)
    shutil.copyfile(new, data)  # in place: same inode, size, state.json; the mtime put back
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns))
    again = _pack(open_(folder), str(tmp_path / "o2"), cache, split)
    fresh = _pack(open_(folder), str(tmp_path / "o3"), str(tmp_path / "fresh"), split)
    assert again == fresh != old


@pytest.mark.parametrize("kind", KINDS)
def test_unchanged_files_reuse_the_cache(kind, tmp_path):
    from packtool.tokenize.hf_input import resolve_sources
    from packtool.tokenize.pipeline import tokenize_to_cache
    write, open_ = KINDS[kind]
    folder = os.path.dirname(write(tmp_path, "a", OLD))
    split = "train" if kind.startswith("DatasetDict") else None
    cfg, cd = TokenizeConfig(shape="tokens"), str(tmp_path / "cache")
    first = tokenize_to_cache(resolve_sources(open_(folder), split), cfg, cd, progress=False)
    again = tokenize_to_cache(resolve_sources(open_(folder), split), cfg, cd, progress=False)
    assert not first.reused and again.reused and again.fingerprint == first.fingerprint


def _replace(new: str, data: str, how: str) -> None:
    if how == "in place":  # same inode: a memory-mapped table sees the new bytes
        shutil.copyfile(new, data)
    else:  # a writer's usual way: a new file renamed over the old
        shutil.copyfile(new, data + ".part")
        os.replace(data + ".part", data)


@pytest.mark.parametrize("how", ["in place", "renamed into place"])
@pytest.mark.parametrize("kind", KINDS)
def test_data_replaced_while_read_never_keys_the_other_rows(kind, how, tmp_path, monkeypatch):
    """S49A-1's class by the object doors (RA-16): the files behind an object replaced after its key
    was taken, before it was read. Refused as the file door refuses it, or read as keyed (an object
    holding its rows in memory, a mapping of the replaced file): never an entry holding the new
    rows under the old bytes' key, which a later run over the old bytes reuses."""
    from packtool.errors import PacktoolInputError
    from packtool.tokenize import pipeline
    from packtool.tokenize.hf_input import resolve_sources
    write, open_ = KINDS[kind]
    split = "train" if kind.startswith("DatasetDict") else None
    data = write(tmp_path, "a", OLD)
    new, old = write(tmp_path, "b", NEW), write(tmp_path, "c", OLD)
    folder = os.path.dirname(data)
    cfg, cache = TokenizeConfig(shape="tokens"), str(tmp_path / "cache")
    real = pipeline.batches_of

    def replaced_then_read(*a, **k):
        monkeypatch.setattr(pipeline, "batches_of", real)
        _replace(new, data, how)
        return real(*a, **k)
    monkeypatch.setattr(pipeline, "batches_of", replaced_then_read)
    try:
        pipeline.tokenize_to_cache(resolve_sources(open_(folder), split), cfg, cache, progress=False)
    except PacktoolInputError as e:
        assert str(e).endswith("the file changed while it was being tokenized; re-run once it is complete")
        assert os.path.basename(data) in str(e)  # the file, not the object's <...> name
    _replace(old, data, how)  # the bytes the key was taken from, back
    again = pipeline.tokenize_to_cache(resolve_sources(open_(folder), split), cfg, cache, progress=False)
    fresh = pipeline.tokenize_to_cache(resolve_sources(open_(folder), split), cfg, str(tmp_path / "fresh"),
                                       progress=False)
    rows = list(range(len(OLD)))
    assert again.read_rows(rows).input_ids.tolist() == fresh.read_rows(rows).input_ids.tolist()
