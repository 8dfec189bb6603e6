"""S32-6: a stored side column's manifest `fill` is FORMAT.md's (0.0 for floats, -1 for ints,
bit for bit) in `verify` and every consumer: another fill, with or without the pads rewritten
to match (re-signed), would be shifted into every target-aligned batch as a made-up value."""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from slab_support import read_manifest, resign, save_manifest
from test_consumers_refuse import _consume

from packtool.align import Alignment
from packtool.planning.core import PackingConfig

pytest.importorskip("torch")
typer = pytest.importorskip("typer")
from typer.testing import CliRunner  # noqa: E402

COLUMNS = {"lp": pa.float32(), "ret": pa.float64(), "iv": pa.int32(), "jv": pa.int64()}
WRONG = {"lp": [5.0, -0.0], "ret": [-9.0], "iv": [0], "jv": [-2]}
CASES = [(c, f, pads) for c, fills in WRONG.items() for f in fills for pads in ("manifest-only", "pads-rewritten")]
CONSUMERS = ("megatron-dataset", "hf", "inspect", "standalone-reader")


@pytest.fixture(scope="module")
def fill_pack(tmp_path_factory):
    from packtool.packing import pack
    from packtool.tokenize.config import TokenizeConfig
    root = tmp_path_factory.mktemp("fill")
    rng = np.random.default_rng(7)
    lens = rng.integers(1, 90, 60)
    ids = [rng.integers(0, 5000, m).tolist() for m in lens]
    cols = {"input_ids": pa.array(ids, pa.list_(pa.int32()))}
    for name, typ in COLUMNS.items():
        cols[name] = pa.array([rng.integers(1, 9, m).astype(typ.to_pandas_dtype()).tolist() for m in lens],
                              pa.list_(typ))
    src = str(root / "in.parquet")
    pq.write_table(pa.table(cols), src)
    clean = str(root / "clean")
    pack([src], Alignment(cp=2, capacity=256), PackingConfig("bfd", overflow="split"),
         TokenizeConfig(shape="tokens", side_columns=tuple(COLUMNS)), output=clean, cache_dir=str(root / "cache"))

    def damaged(col, fill, pads):
        d = str(root / f"{col}-{fill!r}-{pads}")
        if not os.path.exists(d):
            shutil.copytree(clean, d)
            m = read_manifest(d)
            next(c for c in m["side_columns"] if c["name"] == col)["fill"] = fill
            save_manifest(d, m)
            if pads == "pads-rewritten":
                for s in m["shards"]:
                    _rewrite_pads(d, s["file"], col, fill)
        return d
    return clean, damaged


def _rewrite_pads(out, shard, col, fill):
    """Every position outside a real segment set to `fill`, the shard re-signed: only the
    manifest's fill against the format's can tell."""
    path = os.path.join(out, shard)
    t = pq.read_table(path)
    typ = t.schema.field(col).type
    vals = []
    for lens, cu, v in zip(t["seq_lens"].to_pylist(), t["cu_seqlens_padded"].to_pylist(), t[col].to_pylist()):
        real = np.zeros(len(v), bool)
        for n, start in zip(lens, cu):
            real[start:start + n] = True
        vals.append([x if r else fill for x, r in zip(v, real)])
    t = t.set_column(t.schema.get_field_index(col), col, pa.array(vals, typ))
    pq.write_table(t, path, compression="zstd")
    resign(out, shard)


@pytest.mark.parametrize("consumer", CONSUMERS)
def test_the_clean_pack_is_read(fill_pack, consumer, tmp_path):
    kind, got = _consume(consumer, fill_pack[0], str(tmp_path))
    assert kind == "ok", got


@pytest.mark.parametrize("col,fill,pads", CASES)
def test_verify_rejects_a_fill_that_is_not_the_formats(fill_pack, col, fill, pads):
    from packtool.cli.app import app
    r = CliRunner().invoke(app, ["verify", fill_pack[1](col, fill, pads), "--workers", "1", "--json"])
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    said = [p["message"] for p in json.loads(r.output)["problems"]]
    assert any(repr(col) in m and "fill" in m for m in said), said


@pytest.mark.parametrize("consumer", CONSUMERS)
@pytest.mark.parametrize("col,fill,pads", CASES)
def test_every_consumer_refuses_a_fill_that_is_not_the_formats(fill_pack, col, fill, pads, consumer, tmp_path):
    kind, got = _consume(consumer, fill_pack[1](col, fill, pads), str(tmp_path))
    assert kind == "refused", f"{consumer} read {col} with fill {fill!r} ({pads}) without a word"
    assert consumer == "standalone-reader" or (repr(col) in got and "fill" in got), got
