"""S47B-2: an output listing a shard of 0 rows (schema intact, its manifest entry right: what a
user's re-sharding or a merge tool leaves) passes verify and every reader reads it, but
`to_hf()` refused it, saying another run replaced or damaged the output (datasets' parquet
builder fails on a file of no row group). to_hf now gives datasets only the shards holding
slabs (the rows are the same) and the same slabs come back, streamed or not."""
from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest

pytest.importorskip("datasets")

from slab_support import read_manifest, resign, save_manifest, write_pack  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.hf import SlabDataset  # noqa: E402


@pytest.mark.parametrize("where", ["last", "first"])
def test_a_listed_shard_of_no_rows_is_read_as_nothing(tmp_path, where):
    out, _ = write_pack(str(tmp_path / "p"), [40, 70, 90, 30, 100, 20, 60], Alignment(capacity=128))
    man = read_manifest(out)
    first = man["shards"][0]["file"]
    empty = "slabs-00009.parquet"
    pq.write_table(pq.read_table(os.path.join(out, first)).slice(0, 0), os.path.join(out, empty))
    entry = {**man["shards"][0], "file": empty, "rows": 0, "tokens": 0, "loss_tokens": 0}
    man["shards"] = man["shards"] + [entry] if where == "last" else [entry] + man["shards"]
    save_manifest(out, man)
    resign(out, empty)
    ds = SlabDataset(out)
    want = [ds[i]["input_ids"].tolist() for i in range(len(ds))]
    got = ds.to_hf(cache_dir=str(tmp_path / "hfc"))
    assert [list(r["input_ids"]) for r in got] == want
    assert [list(r["input_ids"]) for r in ds.to_hf(streaming=True)] == want


def test_verify_says_the_plain_datasets_path_fails_on_it(tmp_path):
    """RB-7: verify passed such an output with no word, while the plain path HF.md and FORMAT.md
    name (`datasets.load_dataset("parquet", data_dir=...)`) fails on the file of no rows."""
    from packtool.verification import verify
    out, _ = write_pack(str(tmp_path / "p"), [40, 70, 90, 30, 100, 20, 60], Alignment(capacity=128))
    assert not any("hold no rows" in n for n in verify(out, workers=1).notes)
    man = read_manifest(out)
    empty = "slabs-00009.parquet"
    pq.write_table(pq.read_table(os.path.join(out, man["shards"][0]["file"])).slice(0, 0), os.path.join(out, empty))
    man["shards"] = man["shards"] + [{**man["shards"][0], "file": empty, "rows": 0, "tokens": 0, "loss_tokens": 0}]
    save_manifest(out, man)
    resign(out, empty)
    report = verify(out, workers=1)
    said = [n for n in report.notes if "hold no rows" in n]
    assert report.ok and len(said) == 1 and empty in said[0] and "load_dataset" in said[0], report.notes


def _all_empty(tmp_path) -> str:
    """A re-sharding or merge tool's empty output: every listed shard of 0 rows, its entry and the
    stats' counts zeroed, re-signed (pack itself refuses to write one)."""
    out, _ = write_pack(str(tmp_path / "p"), [40, 70], Alignment(capacity=128))
    man = read_manifest(out)
    for e in man["shards"]:
        path = os.path.join(out, e["file"])
        pq.write_table(pq.read_table(path).slice(0, 0), path)
        e.update(rows=0, tokens=0, loss_tokens=0)
    save_manifest(out, man)
    for e in man["shards"]:
        resign(out, e["file"])
    return out


READERS = {
    "verify": lambda out, tmp: __import__("packtool.verification", fromlist=["verify"]).verify(out, workers=1),
    "SlabDataset": lambda out, tmp: SlabDataset(out),
    "to_hf": lambda out, tmp: SlabDataset(out).to_hf(cache_dir=str(tmp / "hfc")),
    "PackedSlabDataset": lambda out, tmp: __import__("packtool.megatron.dataset", fromlist=["x"]).PackedSlabDataset(out),
}


@pytest.mark.parametrize("reader", list(READERS))
def test_an_output_of_no_slab_is_refused_by_every_reader(tmp_path, reader):
    """S49B-4: verify passed it, SlabDataset read 0 slabs, to_hf said another run had replaced the
    output, PackedSlabDataset and train refused it: one verdict now, the manifest's, at every door."""
    from packtool.errors import PacktoolError
    if reader == "PackedSlabDataset":
        pytest.importorskip("megatron.core")
    out = _all_empty(tmp_path)
    if reader == "verify":
        report = READERS[reader](out, tmp_path)
        assert not report.ok and any("holds no slab" in p.message for p in report.problems), report.problems
        return
    with pytest.raises(PacktoolError) as e:
        READERS[reader](out, tmp_path)
    assert "holds no slab" in str(e.value) and "replaced" not in str(e.value), str(e.value)
