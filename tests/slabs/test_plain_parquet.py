"""A packed output is a plain Parquet dataset: Arrow, `datasets` and DuckDB read the folder
with no packtool code, because the manifest's name starts with a dot; polars reads the glob,
or the folder with `hidden_file_prefix="."`. Outputs of the same
schema version that carry the older `manifest.json` still read, verify and inspect."""
from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest
from conftest import GPT2, GSM8K
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.inspection.packed import inspect_packed
from packtool.slabs.format import SlabManifest, read_manifest, write_manifest
from packtool.slabs.names import LEGACY_MANIFEST, MANIFEST, manifest_file
from packtool.slabs.schema import SCHEMA
from packtool.verification.run import verify

GSM8K_FIELDS = ("--prompt-field", "question", "--response-field", "answer")


def _pack(tmp_path, name: str, *extra: str) -> str:
    out = str(tmp_path / name)
    res = CliRunner().invoke(app, ["pack", GSM8K, *GSM8K_FIELDS, "--tokenizer", GPT2, "--max-tokens", "1024",
                                   "--output", out, "--cache-dir", str(tmp_path / "cache"),
                                   "--no-progress", "--json", "--workers", "1", *extra])
    assert res.exit_code == 0, res.output
    return out


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """Shards small enough that the output has several (`--shard-tokens` from the CLI)."""
    return _pack(tmp_path_factory.mktemp("plain"), "out", "--shard-tokens", "8192")


def _expected(out: str) -> tuple[int, int]:
    st = read_manifest(out)["stats"]
    return st["slabs"], st["real_tokens"]


def _by_slab(t: pa.Table) -> pa.Table:
    return t.sort_by("slab_index").select(["slab_index", "input_ids", "loss_mask", "cu_seqlens_padded"])


def test_manifest_is_hidden_and_shards_are_the_rest(packed):
    names = sorted(os.listdir(packed))
    assert MANIFEST.startswith(".") and MANIFEST in names and LEGACY_MANIFEST not in names
    shards = SlabManifest.read(packed).shards
    assert len(shards) >= 3 and sorted(shards) == [n for n in names if n != MANIFEST]


def test_pyarrow_reads_the_folder(packed):
    slabs, tokens = _expected(packed)
    t = pq.read_table(packed)
    assert t.num_rows == slabs and pa.compute.sum(t.column("num_tokens")).as_py() == tokens
    assert t.schema.remove_metadata().equals(SCHEMA.remove_metadata())
    d = pads.dataset(packed, format="parquet")
    assert d.count_rows() == slabs and sorted(os.path.basename(f) for f in d.files) == \
        sorted(SlabManifest.read(packed).shards)
    # the same slabs as packtool's own shard list, read file by file
    own = pa.concat_tables([pq.read_table(p) for p in
                            map(SlabManifest.read(packed).shard_path, range(len(d.files)))])
    assert _by_slab(t).equals(_by_slab(own))


def test_datasets_load_dataset_reads_the_folder(packed, tmp_path):
    datasets = pytest.importorskip("datasets", reason="`datasets` is not installed (pip install datasets)")
    ds = datasets.load_dataset("parquet", data_dir=packed, cache_dir=str(tmp_path / "hf"))
    slabs, tokens = _expected(packed)
    assert list(ds) == ["train"] and ds["train"].num_rows == slabs
    assert sum(ds["train"]["num_tokens"]) == tokens
    assert _by_slab(ds["train"].data.table).equals(_by_slab(pq.read_table(packed)))


def test_duckdb_reads_the_shards(packed):
    duckdb = pytest.importorskip("duckdb", reason="`duckdb` is not installed (pip install duckdb)")
    con = duckdb.connect()
    rows, tokens, first = con.execute(
        f"SELECT count(*), sum(num_tokens), min(slab_index) FROM read_parquet('{packed}/*.parquet')").fetchall()[0]
    assert (rows, int(tokens), first) == (*_expected(packed), 0)
    # a list column comes back whole: the loss mask of the first slab
    mask = con.execute(f"SELECT loss_mask FROM read_parquet('{packed}/*.parquet') "
                       f"WHERE slab_index = 0").fetchall()[0][0]
    want = _by_slab(pq.read_table(packed)).column("loss_mask")[0].as_py()
    assert mask == want


def test_polars_reads_the_shards(packed):
    pl = pytest.importorskip("polars", reason="`polars` is not installed (pip install polars)")
    df = pl.read_parquet(f"{packed}/*.parquet")
    assert (df.height, int(df["num_tokens"].sum())) == _expected(packed)
    first = df.filter(pl.col("slab_index") == 0)["loss_mask"].to_list()[0]
    assert first == _by_slab(pq.read_table(packed)).column("loss_mask")[0].as_py()


def test_polars_on_the_folder_is_what_format_md_says(packed):
    """FORMAT.md: polars lists the hidden manifest and refuses the bare folder; its
    `scan_parquet(..., hidden_file_prefix=".")` reads it. A polars that reads the bare folder
    fails this test, and FORMAT.md's paragraph is to be updated."""
    pl = pytest.importorskip("polars", reason="`polars` is not installed (pip install polars)")
    import inspect
    import warnings
    with pytest.raises(Exception, match="different file extensions"):
        pl.read_parquet(packed)
    if "hidden_file_prefix" not in inspect.signature(pl.scan_parquet).parameters:
        pytest.skip(f"polars {pl.__version__} has no hidden_file_prefix (2.1 has)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # polars marks the parameter unstable
        df = pl.scan_parquet(packed, hidden_file_prefix=".").collect()
    assert (df.height, int(df["num_tokens"].sum())) == _expected(packed)


def test_shard_tokens_cuts_files_not_slabs(packed, tmp_path):
    """`--shard-tokens` changes how many files, never what is in them."""
    one = _pack(tmp_path, "one")  # default: one shard for this small input
    assert len(SlabManifest.read(one).shards) == 1 < len(SlabManifest.read(packed).shards)
    assert _by_slab(pq.read_table(one)).equals(_by_slab(pq.read_table(packed)))
    res = CliRunner().invoke(app, ["pack", GSM8K, *GSM8K_FIELDS, "--tokenizer", GPT2, "--dry-run",
                                   "--shard-tokens", "0", "--cache-dir", str(tmp_path / "cache")])
    assert res.exit_code == 2 and "--shard-tokens" in res.output


def _legacy_copy(packed: str, tmp_path) -> str:
    import shutil
    old = str(tmp_path / "legacy")
    shutil.copytree(packed, old)
    os.replace(os.path.join(old, MANIFEST), os.path.join(old, LEGACY_MANIFEST))
    return old


def test_older_outputs_with_manifest_json_still_read(packed, tmp_path):
    old = _legacy_copy(packed, tmp_path)
    assert manifest_file(old) == os.path.join(old, LEGACY_MANIFEST)
    sm = SlabManifest.read(old)
    assert sm.manifest.endswith(LEGACY_MANIFEST) and sm.shards == SlabManifest.read(packed).shards
    r = verify(old, workers=1)
    assert r.ok, r.problems
    assert any(LEGACY_MANIFEST in n and MANIFEST in n for n in r.notes)  # says how to fix it
    assert inspect_packed(old, what_if=False).loss_tokens == inspect_packed(packed, what_if=False).loss_tokens
    with pytest.raises(pa.ArrowInvalid):  # why the name changed
        pq.read_table(old)
    # writing the manifest again leaves one manifest, under the new name
    write_manifest(old, read_manifest(old))
    assert MANIFEST in os.listdir(old) and LEGACY_MANIFEST not in os.listdir(old)
    assert pq.read_table(old).num_rows == _expected(packed)[0]


def test_verify_names_any_file_a_plain_reader_would_read(packed, tmp_path):
    old = _legacy_copy(packed, tmp_path)
    write_manifest(old, read_manifest(old))
    with open(os.path.join(old, "notes.txt"), "w") as f:
        f.write("a stray file")
    with open(os.path.join(old, "_SUCCESS"), "w") as f:  # hidden from every reader: fine
        f.write("")
    with open(os.path.join(old, LEGACY_MANIFEST), "w") as f:  # beside the new one: stray
        json.dump(read_manifest(old), f)
    r = verify(old, workers=1)
    extra = sorted(p.shard for p in r.problems if p.check == "shard_extra")
    assert extra == [LEGACY_MANIFEST, "notes.txt"] and set(r.counts) == {"shard_extra"}
    assert all("pq.read_table" in p.message for p in r.problems)
