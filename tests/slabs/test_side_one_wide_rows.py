"""A side column of 1-long lists per token (the support of greedy / top-k=1 sampling, a
`fixed_size_list<dtype, 1>` per token) is a 1-wide row, K = 1, as FORMAT.md says (K >= 1) and
as `packtool.online` keeps an [L, 1] tensor (S42-7: pack refused it at row 0 with "is one value
per token in earlier rows": width 1 meant one value, so a 1-wide row had no declaration).
Now the manifest says `"width": 1, "row": true`, the shard holds list<fixed_size_list<dtype, 1>>,
and every reader gives [T, 1].

The class: every input spelling of a 1-wide row x every reader (verify, verify --source,
inspect, packtool.hf, Megatron's dataset, FORMAT.md's standalone reader, the support scorer);
an entry whose `row` was edited away is refused; the finding's two commands."""
from __future__ import annotations

import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import GPT2
from slab_support import format_reader, read_manifest, save_manifest

from packtool.align import Alignment
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig

IDS = [list(range(100 + i * 10, 110 + i * 10 - (i % 3))) for i in range(6)]
SPELLINGS = {  # name -> (column, its Arrow type, the values of a row's token, dtype stored, TokenizeConfig)
    "support_list": ("sup", pa.list_(pa.list_(pa.int32())), lambda t: [t], "int32",
                     dict(support_columns=("sup",))),
    "support_fixed_int64": ("sup", pa.list_(pa.list_(pa.int64(), 1)), lambda t: [t], "int64",
                            dict(support_columns=("sup",))),
    "values_list": ("lp", pa.list_(pa.list_(pa.float32())), lambda t: [-t / 1000], "float32",
                    dict(side_columns=("lp",))),
    "values_fixed": ("lp", pa.list_(pa.list_(pa.float32(), 1)), lambda t: [-t / 1000], "float32",
                     dict(side_columns=("lp",))),
    "values_fixed_pinned": ("lp", pa.list_(pa.list_(pa.float32(), 1)), lambda t: [-t / 1000], "float64",
                            dict(side_columns=("lp:float64",))),
    "values_large_list": ("lp", pa.large_list(pa.large_list(pa.float64())), lambda t: [-t / 1000], "float64",
                          dict(side_columns=("lp",))),
}


def _write(path: str, name: str) -> str:
    col, typ, value, _, _ = SPELLINGS[name]
    pq.write_table(pa.table({"input_ids": IDS, "loss_mask": [[0] + [1] * (len(r) - 1) for r in IDS],
                             col: pa.array([[value(t) for t in r] for r in IDS], typ)}), path)
    return path


@pytest.fixture(scope="module", params=sorted(SPELLINGS))
def packed(request, tmp_path_factory):
    root = tmp_path_factory.mktemp("k1")
    inp = _write(str(root / "in.parquet"), request.param)
    cfg = TokenizeConfig(shape="tokens", tokenizer=GPT2, **SPELLINGS[request.param][4])
    out = str(root / "packed")
    pack([inp], Alignment(cp=2, capacity=64), PackingConfig("bfd"), cfg, output=out, cache_dir=str(root / "cache"))
    return request.param, out, inp, cfg, root


def test_declared_as_a_one_wide_row(packed):
    name, out, _, _, _ = packed
    col, _, _, dtype, _ = SPELLINGS[name]
    (entry,) = read_manifest(out)["side_columns"]
    assert (entry["name"], entry["dtype"], entry["width"], entry["row"]) == (col, dtype, 1, True)
    shard = read_manifest(out)["shards"][0]["file"]
    assert pq.read_schema(os.path.join(out, shard)).field(col).type == pa.list_(pa.list_(pa.from_numpy_dtype(
        np.dtype(dtype)), 1))


def test_verify_and_verify_with_the_source_pass(packed):
    from packtool.verification.run import source_store, verify
    _, out, inp, cfg, root = packed
    assert verify(out, workers=1).ok
    src, _ = source_store([inp], cfg, cache_dir=str(root / "srccache"))
    r = verify(out, source_dir=src, workers=1)
    assert r.ok, r.problems


def test_inspect_reads_it(packed):
    from packtool.inspection.packed import inspect_packed
    name, out, _, _, _ = packed
    (c,) = inspect_packed(out, what_if=False).side_columns
    assert (c.name, c.width, c.row, c.fill_on_real) == (SPELLINGS[name][0], 1, True, 0)


def _tokens_values(name: str, ids: np.ndarray) -> np.ndarray:
    _, typ, value, dtype, _ = SPELLINGS[name]
    given = np.asarray([value(int(t)) for t in ids], typ.value_type.value_type.to_pandas_dtype())  # as written
    return given.astype(dtype)


def test_hf_batches_hold_t_by_1(packed):
    pytest.importorskip("torch")
    from packtool.hf import SlabCollator, SlabDataset
    name, out, _, _, _ = packed
    col = SPELLINGS[name][0]
    ds = SlabDataset(out)
    b = SlabCollator(side_columns=ds.side_columns)([ds[i] for i in range(len(ds))])
    T = b["input_ids"].shape[1]
    assert tuple(b[col].shape) == tuple(b[f"shift_{col}"].shape) == (1, T, 1)
    assert np.array_equal(b[col][0].numpy(), _tokens_values(name, b["input_ids"][0].numpy()))


def test_megatron_batches_hold_t_by_1(packed):
    pytest.importorskip("megatron.core")
    from packtool.megatron.dataset import PackedSlabDataset
    name, out, _, _, _ = packed
    col = SPELLINGS[name][0]
    for r in range(2):
        mb = PackedSlabDataset(out, cp_size=2, cp_rank=r).load([0])
        assert mb.side[col].dim() == 3 and mb.side[col].shape[-1] == 1, mb.side[col].shape
        assert mb.side_targets[col].shape == mb.side[col].shape


def test_format_mds_standalone_reader_reads_it(packed):
    from packtool.layout import cp_rank_index
    from packtool.slabs.format import SlabManifest
    name, out, _, _, _ = packed
    col = SPELLINGS[name][0]
    mod = format_reader()
    m = SlabManifest.read(out)
    slab = pq.read_table(m.shard_path(0)).slice(0, 1).to_pylist()[0]
    cu = np.asarray(slab["cu_seqlens_padded"], np.int64)
    for r in range(2):
        _, _, _, side = mod.read_slab_for_cp_rank(out, m.shards[0], 0, r)
        idx = cp_rank_index(cu[:-1], np.diff(cu), 2, r)
        assert side[col].shape == (idx.size, 1)
        assert np.array_equal(side[col], np.asarray(slab[col], SPELLINGS[name][3])[idx])


def test_the_support_scorer_takes_it(packed):
    torch = pytest.importorskip("torch")
    from packtool.hf import SlabCollator, SlabDataset
    from packtool.online.support import support_logprobs_hf
    name, out, _, _, _ = packed
    if SPELLINGS[name][0] != "sup":
        pytest.skip("a values column")
    ds = SlabDataset(out)
    b = SlabCollator(side_columns=ds.side_columns)([ds[0]])
    T = b["input_ids"].shape[1]
    g = torch.Generator().manual_seed(0)
    lp, _, valid = support_logprobs_hf(b, torch.randn(1, T, 8, generator=g), torch.randn(50257, 8, generator=g), "sup")
    assert valid.any() and torch.equal(lp[valid], torch.zeros(int(valid.sum())))  # one candidate: log 1


def test_an_entry_whose_row_was_edited_away_is_refused(packed, tmp_path):
    """Without `row` the entry declares one value per token against the shard's 1-wide rows."""
    from packtool.errors import PacktoolError
    from packtool.hf import SlabDataset
    from packtool.verification.run import verify
    _, out, _, _, _ = packed
    d = str(tmp_path / "p")
    shutil.copytree(out, d)
    man = read_manifest(d)
    del man["side_columns"][0]["row"]
    save_manifest(d, man)
    r = verify(d, workers=1)
    assert not r.ok and set(r.counts) <= {"schema", "side_width", "manifest"}, r.counts
    with pytest.raises(PacktoolError) as e:
        SlabDataset(d)[0]
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("case", ["k1sup", "fsl1one"])
def test_the_findings_commands_pack_and_verify(tmp_path, case):
    from typer.testing import CliRunner

    from packtool.cli.app import app
    if case == "k1sup":
        t = pa.table({"input_ids": IDS[:4], "loss_mask": [[1] * len(r) for r in IDS[:4]],
                      "support": pa.array([[[x] for x in r] for r in IDS[:4]], pa.list_(pa.list_(pa.int32())))})
        flags = ["--support-columns", "support"]
    else:
        t = pa.table({"input_ids": IDS[:1], "loss_mask": [[1] * len(IDS[0])],
                      "lp": pa.array([[[-0.5]] * len(IDS[0])], pa.list_(pa.list_(pa.float32(), 1)))})
        flags = ["--side-columns", "lp"]
    src = str(tmp_path / f"{case}.parquet")
    pq.write_table(t, src)
    out = str(tmp_path / "p")
    res = CliRunner().invoke(app, ["pack", src, *flags, "-C", "64", "--cp", "2", "-o", out, "-q",
                                   "--tokenizer", GPT2, "--cache-dir", str(tmp_path / "cache")])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["verify", out, "--workers", "1"])
    assert res.exit_code == 0 and "OK: every invariant" in res.output, res.output
