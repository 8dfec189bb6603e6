"""A side column pinned as `NAME:DTYPE` (FORMAT.md "Side columns"; README's way to store
float32 log-probs from doubles) is an output every reader takes, verify included (S42-3:
`pack --side-columns old_logprobs:float32` wrote an output verify failed as "the manifest was
edited": it compared input.tokenize's spelling `old_logprobs:float32` with the declared name).
The class: every pin a column can take x every reader of the output (verify, verify --source,
inspect, packtool.hf, Megatron's dataset); and an edit that makes the pin and the declared
dtype disagree is still `manifest_declared`."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from side_support import side_rows, write_input
from slab_support import read_manifest, save_manifest

from packtool.align import Alignment
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig
from packtool.verification.run import source_store, verify

# (side_columns as given, the dtype each column is stored as): lp is float32 in the input, sup int32
PINS = {
    "lp:float32": (("lp:float32",), {"lp": "float32", "sup": "int32"}),
    "lp:float64": (("lp:float64",), {"lp": "float64", "sup": "int32"}),
    "sup:int32": (("lp", "sup:int32"), {"lp": "float32", "sup": "int32"}),
    "sup:int64": (("lp", "sup:int64"), {"lp": "float32", "sup": "int64"}),
    "both": (("lp:float64", "sup:int64"), {"lp": "float64", "sup": "int64"}),
}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("pins")
    ids, lp, sup = side_rows(n=40, seed=7)
    return root, write_input(str(root / "in.parquet"), ids, lp, sup)


@pytest.fixture(scope="module", params=sorted(PINS))
def pinned(request, inputs):
    root, inp = inputs
    side, dtypes = PINS[request.param]
    cfg = TokenizeConfig(shape="tokens", side_columns=side, support_columns=("sup",))
    out = str(root / f"packed-{request.param}")
    pack([inp], Alignment(cp=2, capacity=256), PackingConfig("bfd", overflow="split"), cfg, output=out,
         cache_dir=str(root / "cache"))
    src, _ = source_store([inp], cfg, cache_dir=str(root / "srccache"))
    return out, src, dtypes


def test_the_pin_is_stored_and_recorded_as_given(pinned):
    out, _, dtypes = pinned
    man = read_manifest(out)
    assert {c["name"]: c["dtype"] for c in man["side_columns"]} == dtypes
    assert any(":" in s for s in man["input"]["tokenize"]["side_columns"])  # verify --source re-tokenizes with it


def test_verify_passes(pinned):
    out, _, _ = pinned
    r = verify(out, workers=1)
    assert r.ok, r.problems


def test_verify_with_the_source_passes(pinned):
    out, src, _ = pinned
    r = verify(out, source_dir=src, workers=1)
    assert r.ok, r.problems


def test_inspect_reads_it(pinned):
    from packtool.inspection.packed import inspect_packed
    out, _, dtypes = pinned
    report = inspect_packed(out, what_if=False)
    assert {c.name: c.dtype for c in report.side_columns} == dtypes


def test_hf_reads_it_in_the_pinned_dtype(pinned):
    pytest.importorskip("torch")
    from packtool.hf import SlabCollator, SlabDataset
    out, _, dtypes = pinned
    ds = SlabDataset(out)
    b = SlabCollator(side_columns=ds.side_columns)([ds[0]])
    for name, dtype in dtypes.items():
        assert str(b[name].dtype) == f"torch.{dtype}", (name, b[name].dtype)


def test_megatron_reads_it(pinned):
    pytest.importorskip("megatron.core")
    from packtool.megatron.dataset import PackedSlabDataset
    out, _, dtypes = pinned
    mb = PackedSlabDataset(out, cp_size=2, cp_rank=0).load([0])
    for name, dtype in dtypes.items():
        assert str(mb.side[name].dtype) == f"torch.{dtype}", (name, mb.side[name].dtype)


@pytest.mark.parametrize("with_source", [False, True], ids=["verify", "verify--source"])
def test_a_pin_edited_against_the_declared_dtype_is_manifest_declared(inputs, tmp_path, with_source):
    root, inp = inputs
    cfg = TokenizeConfig(shape="tokens", side_columns=("lp:float32",), support_columns=("sup",))
    out = str(root / "packed-lp:float32")
    if not (root / "packed-lp:float32").exists():
        pack([inp], Alignment(cp=2, capacity=256), PackingConfig("bfd", overflow="split"), cfg, output=out,
             cache_dir=str(root / "cache"))
    d = str(tmp_path / "p")
    shutil.copytree(out, d)
    man = read_manifest(d)
    man["input"]["tokenize"]["side_columns"] = ["lp:float64"]
    save_manifest(d, man)
    src = source_store([inp], cfg, cache_dir=str(root / "srccache"))[0] if with_source else None
    r = verify(d, source_dir=src, workers=1)
    assert not r.ok and "manifest_declared" in r.counts, (r.counts, r.problems)
    said = [p.message for p in r.problems if p.check == "manifest_declared"]
    assert any("pins lp:float64" in m and "float32" in m for m in said), said


def test_the_findings_example_through_the_cli(tmp_path):
    """S42-3 as the user ran it: doubles pinned to float32 beside an unpinned column, packed and
    verified on the command line: exit 0, the OK line."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from conftest import GPT2
    from typer.testing import CliRunner

    from packtool.cli.app import app
    rows = [dict(input_ids=list(range(100 + i * 10, 110 + i * 10)), loss_mask=[1] * 10, old_logprobs=[-0.5] * 10,
                 advantages=[1.0] * 10) for i in range(4)]
    for r in rows:
        r["support"] = [[t, 1, 2, -1] for t in r["input_ids"]]
    pq.write_table(pa.Table.from_pylist(rows), str(tmp_path / "c.parquet"))
    out = str(tmp_path / "ppin")
    res = CliRunner().invoke(app, ["pack", str(tmp_path / "c.parquet"), "--side-columns", "old_logprobs:float32,advantages",
                                   "--support-columns", "support", "-C", "64", "--cp", "2", "--tokenizer", GPT2,
                                   "-o", out, "-q"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["verify", out, "--workers", "1"])
    assert res.exit_code == 0 and "OK: every invariant" in res.output, res.output
    assert np.dtype(read_manifest(out)["side_columns"][0]["dtype"]) == np.float32
