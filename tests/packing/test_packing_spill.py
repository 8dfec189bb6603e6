"""The local engine's sharded plan with placements on disk (packtool.planning.spill,
slabs/routed.py): many plan shards and output shards verify against the source, place
every row once, write the same bytes with any number of writer threads; one shard is the
global plan's bytes; the spill directory never outlives the pack."""
from __future__ import annotations

import json
import os
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import packtool.slabs.routed as spill_write
from packtool.align import Alignment
from packtool.cli.app import app
from packtool.packing import pack
from packtool.planning.core import PackingConfig, PlanError
from packtool.planning.sharded import ShardedPlan
from packtool.slabs.names import MANIFEST
from packtool.tokenize.config import TokenizeConfig
from packtool.verification.run import source_store, verify

TOK = TokenizeConfig(shape="tokens")
ALIGN = Alignment(tp=2, cp=2, fp8="blockwise", capacity=1024)
SHARD_TOKENS = 40_000  # several output shards


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """600 pre-tokenized rows, some longer than the capacity (split), labels on half the rows."""
    d = tmp_path_factory.mktemp("src")
    rng = np.random.default_rng(3)
    lens = np.where(rng.random(600) < 0.05, rng.integers(1100, 3000, 600), rng.integers(2, 400, 600))
    ids = [rng.integers(0, 50000, n).astype(np.int32) for n in lens]
    labels = [np.where(np.arange(n) < n // 3, -100, x) if i % 2 else x
              for i, (n, x) in enumerate(zip(lens, ids))]
    path = str(d / "tok.parquet")
    pq.write_table(pa.table({"input_ids": ids, "labels": labels}), path, row_group_size=128)
    return path, str(d / "cache")


def _pack(source, out, **kw):
    path, cache = source
    kw.setdefault("shard_tokens", SHARD_TOKENS)
    return pack([path], ALIGN, kw.pop("packing", PackingConfig("bfd", overflow="split")), TOK,
                output=str(out), cache_dir=cache, **kw)


def _files(out) -> dict[str, bytes]:
    return {f: open(os.path.join(out, f), "rb").read() for f in sorted(os.listdir(out))}


def _leftovers(parent) -> list[str]:
    return [f for f in os.listdir(parent) if "packtool-spill" in f or "packtool-tmp" in f]


@pytest.mark.parametrize("dp", [1, 4])
def test_many_plan_shards_verify_and_place_every_row_once(source, tmp_path, dp):
    out = tmp_path / "out"
    res = _pack(source, out, plan_shard_rows=64, packing=PackingConfig("bfd", overflow="split", dp=dp))
    assert isinstance(res.plan, ShardedPlan) and res.plan.stats.shards == 10
    assert res.plan.handles == []  # the placements are gone with the spill
    assert len(res.shards) > 2
    src, fp = source_store([source[0]], TOK, cache_dir=source[1])
    rep = verify(str(out), source_dir=src, source_fingerprint=fp)
    assert rep.ok, [p.message for p in rep.problems]
    t = pa.concat_tables([pq.read_table(os.path.join(out, s.file)) for s in res.shards])
    src_idx = np.concatenate(t.column("source_index").to_numpy(zero_copy_only=False))
    chunk = np.concatenate(t.column("chunk_index").to_numpy(zero_copy_only=False))
    seq_lens = np.concatenate(t.column("seq_lens").to_numpy(zero_copy_only=False))
    real = src_idx >= 0
    pairs = src_idx[real] * 100 + chunk[real]
    assert np.unique(pairs).size == pairs.size == res.plan.num_segments  # every (row, chunk) once
    lengths = np.diff(np.load(os.path.join(src, "offsets.npy")))
    assert np.array_equal(np.bincount(src_idx[real], weights=seq_lens[real], minlength=600), lengths)
    man = json.load(open(out / MANIFEST))
    assert man["stats"]["slabs"] == res.plan.num_slabs == res.summary.slabs
    assert res.plan.num_slabs <= res.plan.lower_bound * 1.05 + dp
    if dp > 1:
        assert res.plan.num_slabs % dp == 0


def test_bytes_do_not_depend_on_writer_threads(source, tmp_path):
    one = _pack(source, tmp_path / "w1", plan_shard_rows=100, workers=1)
    _pack(source, tmp_path / "w2", plan_shard_rows=100, workers=2)
    assert len(one.shards) > 2 and one.plan.stats.shards > 1
    assert _files(tmp_path / "w1") == _files(tmp_path / "w2")


def test_one_shard_is_the_global_plan_bytes(source, tmp_path):
    g = _pack(source, tmp_path / "g", plan_shard_rows=0, workers=2)
    s = _pack(source, tmp_path / "s", workers=2)  # the default: 600 rows fit one shard
    assert not isinstance(g.plan, ShardedPlan) and s.plan.stats.shards == 1
    assert len(g.shards) > 2
    assert _files(tmp_path / "g") == _files(tmp_path / "s")
    assert g.summary.padding == s.summary.padding and g.summary.slabs == s.summary.slabs


@pytest.mark.parametrize("workers", [1, 2])
def test_spill_is_removed_after_success_and_failures(source, tmp_path, monkeypatch, workers):
    _pack(source, tmp_path / "ok", plan_shard_rows=64, workers=workers)
    assert _leftovers(tmp_path) == []
    calls = []

    def fail_second(*a, **kw):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("disk full (test)")
        return real(*a, **kw)

    real = spill_write.write_shard_file
    monkeypatch.setattr(spill_write, "write_shard_file", fail_second)
    with pytest.raises(OSError, match="disk full"):
        _pack(source, tmp_path / "bad", plan_shard_rows=64, workers=workers)
    assert _leftovers(tmp_path) == [] and not (tmp_path / "bad").exists()
    monkeypatch.undo()
    # a failure while planning: a row over the capacity with --overflow error
    with pytest.raises(PlanError, match="exceeds capacity"):
        _pack(source, tmp_path / "err", plan_shard_rows=64, packing=PackingConfig("bfd", overflow="error"))
    assert _leftovers(tmp_path) == [] and not (tmp_path / "err").exists()
    # a dry run spills to the system's temporary directory, and removes it too
    sys_tmp = tmp_path / "systmp"
    sys_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(sys_tmp))
    res = _pack(source, None, plan_shard_rows=64, dry_run=True)
    assert res.output is None and res.plan.stats.shards == 10 and os.listdir(sys_tmp) == []


def test_a_flat_store_that_disagrees_with_the_cache_is_rebuilt(source, tmp_path, capsys):
    """The store no longer matches cache.json's checksum: the cache is rebuilt (one line),
    never packed from (issue 13; tests/tokenize/test_cache_trust.py has the rest)."""
    res = _pack(source, tmp_path / "a", plan_shard_rows=64)
    store = os.path.join(os.path.dirname(res.cache_path), "flat", "offsets.npy")
    good = np.load(store)
    bad = good.copy()
    bad[300:] += 1  # row 299 one token longer
    np.save(store, bad)
    capsys.readouterr()
    _pack(source, tmp_path / "b", plan_shard_rows=64)
    assert "rebuilding" in capsys.readouterr().err
    np.testing.assert_array_equal(np.load(store), good)
    assert verify(str(tmp_path / "b")).ok and _leftovers(tmp_path) == []


def test_cli_plan_shard_rows_for_the_local_engine(source, tmp_path):
    path, cache = source
    base = ["pack", path, "--shape", "tokens", "-C", "1024", "--overflow", "split", "--cache-dir", cache,
            "--no-progress"]
    r = CliRunner().invoke(app, base + ["-o", str(tmp_path / "s"), "--plan-shard-rows", "100", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output.strip().splitlines()[-1])
    assert d["sharded_plan"]["shards"] == 6 and verify(str(tmp_path / "s")).ok
    r = CliRunner().invoke(app, base + ["-o", str(tmp_path / "g"), "--plan-shard-rows", "0"])
    assert r.exit_code == 0, r.output
    assert "Sharded plan" not in r.output and verify(str(tmp_path / "g")).ok
    assert "--plan-shard-rows" in CliRunner().invoke(app, ["pack", "--help"]).output
