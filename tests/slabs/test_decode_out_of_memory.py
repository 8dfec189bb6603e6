"""S47B-7: an allocation that fails while decoding a good shard (a long-context slab under a
`ulimit -v`) was a damaged file: verify's `shard_unreadable` "truncated or corrupt: re-run
`packtool pack`" (exit 1), and "cannot be decoded ... run `packtool verify`" (a FormatError) in
every reader. It is out of memory (storage.failures.store_failure asks free_memory): a
MemoryError naming the shard, in every consumer, and the CLI's `resources` line (exit 2).
RB-6 (s48): to_hf hands the checked shards to `datasets`, whose failures hf/load.translated says;
an allocation failing in datasets' Parquet conversion (or its select) was "another run replaced or
damaged the output", kind input. Every door that reads a shard is one case below.

The failure is made where Arrow decodes (a shard's footer, its row groups), in the forms it takes:
Arrow's own MemoryError, and C++'s bad_alloc that Parquet's decoder passes on in an OSError. The
real thing (a 120 MB slab under `ulimit -v 1200000`) is /work/notes/s47/repro/b7_oom_corrupt.sh."""
from __future__ import annotations

import json
import os
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from slab_support import write_pack

import packtool
from packtool.align import Alignment
from packtool.errors import PacktoolError

LENGTHS = np.random.default_rng(7).integers(5, 60, 40)
FORMS = {
    "arrow": lambda: pa.ArrowMemoryError("realloc of size 134217728 failed"),
    "bad_alloc": lambda: OSError("Couldn't deserialize thrift: std::bad_alloc"),
    # RB-10: a mapping the address space cannot hold (ulimit -v), as Arrow says it (no errno):
    # datasets maps every Arrow file of to_hf's conversion, and to_hf blamed its cache_dir keyword
    "mmap": lambda: OSError("Memory mapping file failed: Cannot allocate memory"),
}


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return write_pack(str(tmp_path_factory.mktemp("oom")), LENGTHS, Alignment(capacity=128))[0]


def _fail_at(monkeypatch, where: str, form: str):
    def fail(*a, **k):
        raise FORMS[form]()
    if where == "footer":
        monkeypatch.setattr(pq, "read_metadata", fail)
        monkeypatch.setattr(pq.ParquetFile, "__init__", fail)
    else:
        monkeypatch.setattr(pq.ParquetFile, "read_row_group", fail)
        monkeypatch.setattr(pq.ParquetFile, "iter_batches", fail)


def _reader(d):
    from packtool.slabs.format import SlabManifest
    from packtool.slabs.reader import SlabIndex, SlabReader
    m = SlabManifest.read(d)
    r = SlabReader(m, SlabIndex.build(m))
    return r.row(len(r.index) - 1)


def _hf(d):
    ds = pytest.importorskip("packtool.hf").SlabDataset(d)
    return ds[len(ds) - 1]


def _megatron(d):
    pytest.importorskip("torch")
    from packtool.megatron.dataset import PackedSlabDataset
    return next(PackedSlabDataset(d).steps())


def _to_hf(d):
    pytest.importorskip("datasets", reason="the hf extra is not installed")
    # a fresh datasets cache each time: a conversion cached by one case would skip the next one's
    cache = tempfile.mkdtemp(prefix="hf-", dir=os.path.dirname(d))
    return pytest.importorskip("packtool.hf").SlabDataset(d).to_hf(cache_dir=cache)


def _fail_in_datasets(monkeypatch, where: str, form: str):
    """The allocation failing inside `datasets`, past packtool's own checks of every shard: its
    Parquet builder's read (what `ulimit -v` gives for a long-context slab), or its select."""
    import datasets
    from datasets.packaged_modules.parquet import parquet

    def fail(*a, **k):
        raise FORMS[form]()
    if where == "datasets' conversion":
        def tables(*a, **k):
            yield fail()
        monkeypatch.setattr(parquet.Parquet, "_generate_tables", tables)
    else:
        monkeypatch.setattr(datasets.Dataset, "select", fail)


CONSUMERS = {"verify": lambda d: packtool.verify(d, workers=1), "inspect": packtool.inspect,
             "reader": _reader, "hf.SlabDataset": _hf, "megatron": _megatron, "hf.to_hf": _to_hf}
# every door that reads a shard: each consumer where Arrow decodes it, and to_hf's steps in datasets
DOORS = [(c, w) for c in CONSUMERS for w in ("footer", "row group")] + \
        [("hf.to_hf", "datasets' conversion"), ("hf.to_hf", "datasets' select")]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(("consumer", "where"), DOORS, ids=[f"{c}-{w}" for c, w in DOORS])
def test_an_allocation_failed_decoding_a_shard_is_out_of_memory_in_every_consumer(out, monkeypatch, consumer,
                                                                                   where, form):
    if where.startswith("datasets"):
        _fail_in_datasets(monkeypatch, where, form)
    else:
        _fail_at(monkeypatch, where, form)
    try:
        got = CONSUMERS[consumer](out)
    except MemoryError as e:
        msg = str(e)
    except PacktoolError as e:  # a FormatError: the file called damaged
        pytest.fail(f"{type(e).__name__}: {e}")
    else:  # verify's report: a finding instead of an error
        pytest.fail(f"no error: {got!r}"[:400])
    # packtool's readers name the shard; datasets' error names none: the output then
    named = out if where.startswith("datasets") else "slabs-0000"
    assert "out of memory" in msg and named in msg and "\n" not in msg, msg
    assert "corrupt" not in msg and "re-run" not in msg and "verify" not in msg, msg
    assert "replaced" not in msg and "damaged" not in msg, msg


@pytest.mark.parametrize("where", ["footer", "row group"])
@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_the_command_line_says_out_of_memory_kind_resources(out, monkeypatch, capsys, command, where):
    from cli_main import run_main
    _fail_at(monkeypatch, where, "arrow")
    argv = [command, out, "--json"] + (["--workers", "1"] if command == "verify" else [])
    assert run_main(monkeypatch, argv) == [2]
    cap = capsys.readouterr()
    err = [line for line in cap.err.splitlines() if line.startswith("error: ")]
    assert len(err) == 1 and "out of memory" in err[0] and "slabs-0000" in err[0], cap.err
    assert "corrupt" not in err[0] and "re-run" not in err[0], err
    said = json.loads(cap.out.strip().splitlines()[-1])["error"]
    assert said["kind"] == "resources" and said["exit_code"] == 2, said
    # RB-8 (s48): --json's path is the shard the line names (it was null); the line gives no fix already in
    # force (verify's "--workers 1" when run with it) nor one no flag does ("read less at once"), and names
    # the shard once, in its own words (not prefixed as a refused row is)
    assert said["path"] and os.path.basename(said["path"]).startswith("slabs-0000"), said
    assert "fewer processes" not in err[0] and "read less" not in err[0], err
    assert err[0].count("slabs-0000") == 1 and "run on a machine with more memory" in err[0], err
