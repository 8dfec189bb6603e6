"""Hugging Face datasets and Arrow objects as `pack` inputs (packtool/tokenize/hf_input.py):
each kind gives the same shard bytes as the same rows in a Parquet or JSONL file, the cache
is keyed by the dataset's own fingerprint, and the CLI reads a dataset by name or folder."""
from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest
from conftest import GPT2
from test_arrow_ingest import list_array, pack_digests, rows, shard_digests, write_jsonl

from packtool.align import Alignment
from packtool.errors import PacktoolInputError
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig

datasets = pytest.importorskip("datasets", reason="the hf extra (datasets) is not installed")
datasets.disable_progress_bars()


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    """2,500 pre-tokenized rows as a Parquet file (3 row groups) and a JSONL file."""
    d = tmp_path_factory.mktemp("tokens")
    ids = rows(2500, seed=5)
    table = pa.table({"input_ids": list_array(ids)})
    pq.write_table(table, d / "t.parquet", row_group_size=1000)
    write_jsonl(d / "t.jsonl", {"input_ids": ids})
    return d, table


def test_every_input_kind_gives_the_file_bytes(tokens, tmp_path):
    d, table = tokens
    ref = pack_digests([str(d / "t.parquet")], tmp_path, "parquet")
    assert ref and pack_digests([str(d / "t.jsonl")], tmp_path, "jsonl") == ref
    ds = datasets.Dataset.from_parquet(str(d / "t.parquet"), cache_dir=str(tmp_path / "hf"))
    kinds = {
        "Dataset": (ds, {}),
        "Dataset after select": (ds.select(range(ds.num_rows)), {}),  # an indices mapping
        "IterableDataset": (ds.to_iterable_dataset(num_shards=3), {}),
        "DatasetDict": (datasets.DatasetDict({"train": ds, "test": ds.select([0])}), {"split": "train"}),
        "pyarrow.Table": (table, {}),
        "pyarrow.RecordBatch": (pa.Table.from_batches(table.to_batches()).combine_chunks().to_batches()[0], {}),
        "pyarrow.dataset": (pads.dataset(str(d / "t.parquet")), {}),
    }
    for name, (obj, kw) in kinds.items():
        assert pack_digests(obj, tmp_path, name.replace(" ", "_"), **kw) == ref, name


def test_iterable_dataset_is_streamed(tmp_path, monkeypatch):
    """A generator-backed IterableDataset is read batch by batch as it is produced: the first
    batch reaches the cache before the generator has made every row."""
    import packtool.tokenize.pipeline as pipeline
    ids = rows(600, seed=6)
    produced, at_first = [], []
    inner = pipeline._tokens_batch

    def spy(batch, *a, **k):
        at_first.append(len(produced))
        return inner(batch, *a, **k)

    def gen():
        for i, r in enumerate(ids):
            produced.append(i)
            yield {"input_ids": r}

    feats = datasets.Features({"input_ids": datasets.Sequence(datasets.Value("int32"))})
    stream = datasets.IterableDataset.from_generator(gen, features=feats)
    path = write_jsonl(tmp_path / "s.jsonl", {"input_ids": ids})
    monkeypatch.setattr(pipeline, "_tokens_batch", spy)
    got = pack_digests(stream, tmp_path, "stream", batch_size=100)
    assert at_first[0] < len(ids) and len(at_first) == 6
    assert got == pack_digests([path], tmp_path, "file")


def test_text_dataset_matches_the_jsonl_file(tmp_path):
    texts = [f"row {i}: " + "packing " * (i % 17) for i in range(300)]
    path = write_jsonl(tmp_path / "x.jsonl", {"text": texts})
    cfg = TokenizeConfig(tokenizer=GPT2)

    def run(inp, name):
        out = str(tmp_path / name)
        pack(inp, Alignment(capacity=512), PackingConfig("bfd"), cfg, out, cache_dir=str(tmp_path / f"c{name}"))
        return shard_digests(out)
    assert run(datasets.Dataset.from_dict({"text": texts}), "ds") == run([path], "file")


def test_cache_is_keyed_by_the_dataset_fingerprint(tokens, tmp_path):
    from packtool.tokenize.hf_input import resolve_sources
    from packtool.tokenize.pipeline import tokenize_to_cache
    d, table = tokens
    ds = datasets.Dataset.from_parquet(str(d / "t.parquet"), cache_dir=str(tmp_path / "hf"))
    cfg, cd = TokenizeConfig(shape="tokens"), str(tmp_path / "cache")
    first = tokenize_to_cache(resolve_sources(ds), cfg, cd, progress=False)
    again = tokenize_to_cache(resolve_sources(ds), cfg, cd, progress=False)
    assert not first.reused and again.reused and again.fingerprint == first.fingerprint
    assert first.meta["inputs"][0]["fingerprint"] == ds._fingerprint
    other = ds.select(range(10))
    assert other._fingerprint != ds._fingerprint
    assert not tokenize_to_cache(resolve_sources(other), cfg, cd, progress=False).reused
    # a table without a fingerprint: keyed by content, so equal tables share a cache
    t1 = tokenize_to_cache(resolve_sources(table), cfg, cd, progress=False)
    t2 = tokenize_to_cache(resolve_sources(pa.table({"input_ids": table.column(0)})), cfg, cd, progress=False)
    assert t2.reused and t2.fingerprint == t1.fingerprint
    t3 = tokenize_to_cache(resolve_sources(table.slice(1)), cfg, cd, progress=False)
    assert t3.fingerprint != t1.fingerprint


def test_dataset_dict_needs_a_split(tokens, tmp_path):
    d, table = tokens
    dd = datasets.DatasetDict({"train": datasets.Dataset(datasets.table.InMemoryTable(table)),
                               "validation": datasets.Dataset(datasets.table.InMemoryTable(table))})
    with pytest.raises(PacktoolInputError, match=r"needs a split.*train, validation"):
        pack_digests(dd, tmp_path, "nosplit")
    with pytest.raises(PacktoolInputError, match=r"split applies to a dataset"):
        pack_digests([str(d / "t.parquet")], tmp_path, "filesplit", split="train")
    with pytest.raises(PacktoolInputError, match=r"cannot read a dict"):
        pack_digests({"input_ids": [[1]]}, tmp_path, "dict")


def _cli(args, monkeypatch, env=None):
    from typer.testing import CliRunner

    from packtool.cli.app import app
    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    return CliRunner().invoke(app, args)


def test_cli_reads_a_local_dataset_repo_folder(tokens, tmp_path, monkeypatch):
    d, table = tokens
    repo = tmp_path / "repo"
    (repo / "data").mkdir(parents=True)
    pq.write_table(table, repo / "data" / "train-00000-of-00001.parquet", row_group_size=1000)
    pq.write_table(table.slice(0, 5), repo / "data" / "test-00000-of-00001.parquet")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    out = str(tmp_path / "cli-out")
    r = _cli(["pack", str(repo), "--split", "train", "-C", "1024", "--overflow", "split",
              "--shape", "tokens", "-o", out, "--cache-dir", str(tmp_path / "c"), "--json"], monkeypatch)
    assert r.exit_code == 0, r.output
    assert shard_digests(out) == pack_digests([str(d / "t.parquet")], tmp_path, "ref")


def test_cli_offline_name_says_how_to_point_at_a_copy(tmp_path, monkeypatch):
    r = _cli(["pack", "nobody-here/no-such-dataset", "--split", "train", "--shape", "tokens",
              "-o", str(tmp_path / "o"), "--cache-dir", str(tmp_path / "c")], monkeypatch,
             env={"HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp_path / "hf")})
    assert r.exit_code == 2
    assert "nobody-here/no-such-dataset" in r.output and "pass DIR" in r.output
    assert len(r.output.strip().splitlines()) <= 2  # one line (rich may wrap it once)
    assert not os.path.exists(tmp_path / "o")


def test_unreachable_hub_without_offline_mode_gets_the_offline_hint(monkeypatch):
    """The Hub down but HF_HUB_OFFLINE unset: huggingface_hub's LocalEntryNotFoundError
    ("Couldn't reach ...") is the offline case too, not a --config problem."""
    datasets = pytest.importorskip("datasets")
    from packtool.tokenize.hub_load import is_dataset_name, load_dataset

    class LocalEntryNotFoundError(OSError):
        pass

    def unreachable(*a, **k):
        raise LocalEntryNotFoundError("Couldn't reach 'owner/name' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(datasets, "load_dataset", unreachable)
    with pytest.raises(PacktoolInputError, match=r"owner/name: dataset not in the local cache.*pass DIR"):
        load_dataset("owner/name", "train", None)
    for path in ("x.jsonl.zst", "x.jsonl.bz2", "x.csv", "x.tsv", "x.jsonl.zstd"):
        assert not is_dataset_name(path)  # a missing file of a known type is not a Hub name
    assert is_dataset_name("owner/name")
