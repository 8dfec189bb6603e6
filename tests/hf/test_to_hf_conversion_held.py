"""S48B-6: to_hf handed out its datasets-cache conversion as it found it: one changed since it was
made (a shared or long-lived HF_DATASETS_CACHE, a disk error, an edit) came back as the output's
rows (every id +100, no word), and one cut short was datasets' ArrowInvalid said as the caller's
`cache_dir` keyword refused, a fix that cannot work. The conversion is now held to the bytes
datasets wrote (a record beside them, written when to_hf first meets them): a changed one is one
line, kind config (RB-9), naming the conversion's folder and the fix (remove it); removed, to_hf makes it
again with the checked rows. Over every place of the datasets cache, every load, every damage."""
from __future__ import annotations

import glob
import os
import shutil

import pyarrow as pa
import pytest

pytest.importorskip("torch")
datasets = pytest.importorskip("datasets", reason="the hf extra is not installed")

from slab_support import write_pack  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.errors import PacktoolConfigError  # noqa: E402
from packtool.hf import SlabDataset  # noqa: E402

LENGTHS = [40, 70, 90, 30, 100, 20, 60]
PLACES = ("load_kwargs cache_dir", "HF_DATASETS_CACHE")
LOADS = {"plain": {}, "keep_in_memory": {"keep_in_memory": True}}


def _edited(path):
    """Every real id + 100, written whole (as an edit or a copy from elsewhere would be)."""
    with pa.memory_map(path) as src:
        t = pa.ipc.open_stream(src).read_all()
    i = t.schema.get_field_index("input_ids")
    rows = [[x + 100 if x else x for x in r] for r in t.column(i).to_pylist()]
    t = t.set_column(i, t.schema.field(i), pa.array(rows, t.schema.field(i).type))
    with pa.OSFile(path + ".new", "wb") as sink, pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    os.replace(path + ".new", path)


def _truncated(path):
    shutil.copy(path, path + ".new")
    os.truncate(path + ".new", os.path.getsize(path) // 2)
    os.replace(path + ".new", path)


DAMAGES = {"edited": _edited, "truncated": _truncated}


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("load", LOADS)
@pytest.mark.parametrize("place", PLACES)
def test_a_conversion_changed_since_it_was_made_is_refused_naming_its_folder(tmp_path, monkeypatch, place, load,
                                                                               damage):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", datasets.config.HF_DATASETS_CACHE)
    out = write_pack(str(tmp_path / "a"), LENGTHS, Alignment(capacity=128), shard_tokens=200, seed=0)[0]
    cache, kw = str(tmp_path / "hfc"), dict(LOADS[load])
    if place == "HF_DATASETS_CACHE":
        datasets.config.HF_DATASETS_CACHE = cache
    else:
        kw["cache_dir"] = cache
    ds = SlabDataset(out)
    want = [ds[i]["input_ids"].tolist() for i in range(len(ds))]
    assert [list(r) for r in ds.to_hf(**kw)["input_ids"]] == want
    assert [list(r) for r in SlabDataset(out).to_hf(**kw)["input_ids"]] == want  # reused: no false alarm
    made = glob.glob(os.path.join(cache, "parquet", "packtool-*", "**", "parquet-train*.arrow"), recursive=True)
    assert len(made) == 1, made
    DAMAGES[damage](made[0])
    with pytest.raises(PacktoolConfigError) as e:
        SlabDataset(out).to_hf(**kw)
    folder = os.path.join(cache, "parquet", os.path.relpath(made[0], os.path.join(cache, "parquet")).split(os.sep)[0])
    msg = str(e.value)
    assert f"remove the folder {folder} " in msg and "parquet-train.arrow changed since" in msg, msg
    assert "load_kwargs" not in msg and "\n" not in msg, msg
    shutil.rmtree(folder)  # the fix given
    assert [list(r) for r in SlabDataset(out).to_hf(**kw)["input_ids"]] == want
