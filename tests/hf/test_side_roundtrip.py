"""Side columns from `pack` (pre-tokenized rows, --overflow split, pads inside, between and
after segments at tp=2 cp=2 fp8, and with a fixed-length fill) to every consumer's batch: the HF collator (pads dropped,
and kept) and PackedSlabDataset on both CP ranks give each segment its source row's slice
(split chunks their own slice) as stored, and shifted like labels with the fill at every
segment's last position."""
from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

torch = pytest.importorskip("torch")

from side_support import K, side_rows, write_input  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from packtool.cli.app import app  # noqa: E402
from packtool.hf import SlabCollator, SlabDataset  # noqa: E402
from packtool.layout import cp_rank_index  # noqa: E402


SETTINGS = {"tp2-cp2-fp8": ["--tp", "2", "--cp", "2", "--fp8", "tensorwise", "--max-tokens", "256"],
            "cp2-fixed-length": ["--cp", "2", "--tp", "2", "--max-tokens", "256", "--fixed-length", "256"]}


@pytest.fixture(scope="module", params=list(SETTINGS))
def packed(tmp_path_factory, request):
    tmp = tmp_path_factory.mktemp("side")
    ids, lp, sup = side_rows(n=70, seed=3, long=400)
    inp = write_input(str(tmp / "in.parquet"), ids, lp, sup)
    out = str(tmp / "out")
    res = CliRunner().invoke(app, ["pack", inp, "--shape", "tokens", "--side-columns", "lp", "--support-columns",
                                   "sup", "--output", out, "--cache-dir", str(tmp / "cache"), "--no-progress",
                                   "--json", "--overflow", "split", *SETTINGS[request.param]])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["overflow"]["chunks"] > 0
    rows = pq.read_table(f"{out}/{SlabDataset(out).manifest.shards[0]}",
                         columns=["source_index", "source_offset", "seq_lens"]).to_pylist()
    assert len(SlabDataset(out).manifest.shards) == 1
    return out, ids, lp, sup, rows


def _expected(row, src_vals, fill):
    """(as stored, target-aligned) per real segment of a slab, from the source rows."""
    stored, shifted = [], []
    for s, off, n in zip(row["source_index"], row["source_offset"], row["seq_lens"]):
        if s < 0:
            continue
        v = src_vals[s][off:off + n]
        stored.append(v)
        shifted.append(np.concatenate((v[1:], np.full_like(v[:1], fill))))
    return np.concatenate(stored), np.concatenate(shifted)


def test_hf_batches_carry_each_segments_slice(packed):
    out, ids, lp, sup, rows = packed
    ds = SlabDataset(out)
    col = SlabCollator(side_columns=ds.side_columns)
    for i in range(len(ds)):
        b = col([ds[i]])
        row = rows[int(ds.order[i])]
        for name, vals, fill in (("lp", lp, 0.0), ("sup", sup, -1)):
            stored, shifted = _expected(row, vals, fill)
            assert np.array_equal(b[name][0].numpy(), stored), (i, name)
            assert np.array_equal(b[f"shift_{name}"][0].numpy(), shifted), (i, name)
        assert b["sup"].shape[-1] == K
    kp = SlabCollator(keep_pads=True, side_columns=ds.side_columns)([ds[0], ds[1]])
    assert kp["lp"].shape[1] == kp["input_ids"].shape[1] == ds[0]["input_ids"].size + ds[1]["input_ids"].size


def test_megatron_batches_on_both_cp_ranks(packed):
    pytest.importorskip("megatron.core")
    from packtool.megatron.dataset import PackedSlabDataset
    out, ids, lp, sup, rows = packed
    for r in range(2):
        ds = PackedSlabDataset(out, cp_size=2, cp_rank=r)
        for i, row in enumerate(rows[:12]):
            mb = ds.load([i])
            cu = np.concatenate(([0], np.cumsum(ds.reader.row(i).seg_padded)))
            idx = cp_rank_index(cu[:-1], np.diff(cu), 2, r)
            for name, vals, fill in (("lp", lp, 0.0), ("sup", sup, -1)):
                T = int(cu[-1])
                whole = np.full((T,) + vals[0].shape[1:], fill, vals[0].dtype)
                target = whole.copy()
                for a, s, off, n in zip(cu[:-1], row["source_index"], row["source_offset"], row["seq_lens"]):
                    if s < 0:
                        continue
                    whole[a:a + n] = vals[s][off:off + n]
                    target[a:a + n - 1] = vals[s][off + 1:off + n]
                assert np.array_equal(mb.side[name][0].numpy(), whole[idx]), (r, i, name)
                assert np.array_equal(mb.side_targets[name][0].numpy(), target[idx]), (r, i, name)
