"""Side columns in slabs reach every Megatron consumer where they belong: the reader gives
them as stored, `PackedSlabDataset` gives them token-aligned (`side`) and shifted like labels
(`side_targets`) on every CP rank, whole slabs and merged micro-batches, at alignments that
put pads inside, between and after segments; and equal to `online.thd_batch` of the same
sequences. Slabs are written from FORMAT.md by the test helper (not by packtool's writer)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core")

from megatron_slabs import greedy_bins, logprob_of, random_sequences, random_side, write_slab_dir  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.megatron.dataset import PackedSlabDataset  # noqa: E402
from packtool.slabs.format import SlabManifest  # noqa: E402
from packtool.slabs.reader import SlabIndex, SlabReader  # noqa: E402

ALIGNS = [Alignment(cp=2, capacity=96), Alignment(tp=2, cp=2, fp8="tensorwise", capacity=128, fixed_length=128)]


def _slabs(tmp_path, align, seed=0):
    seqs = random_sequences(24, 2, 40, seed=seed)
    side = random_side(seqs, seed=seed)
    bins = greedy_bins(seqs, align)
    return seqs, side, bins, str(write_slab_dir(str(tmp_path / "s"), seqs, bins, align, rows_per_group=3,
                                                side=side))


def _check_batch(mb):
    """Target-aligned values belong to the token the position predicts (its label); token-
    aligned ones to the position's own token; pads and segment ends hold the fill."""
    w = mb.loss_weight[0] > 0
    lab = mb.labels[0][w].numpy()
    assert np.array_equal(mb.side_targets["old_logprobs"][0][w].numpy(), logprob_of(lab))
    sup = mb.side_targets["support"][0][w].numpy()
    assert ((sup == lab[:, None]).sum(1) == 1).all()
    real = mb.input_ids[0].numpy() != 0
    assert np.array_equal(mb.side["old_logprobs"][0][real].numpy(), logprob_of(mb.input_ids[0][real].numpy()))
    assert (mb.side["returns"][0][~real] == 0.0).all() and (mb.side["support"][0][~real] == -1).all()
    assert mb.side["support"].shape[-1] == 4 and mb.side["support"].dtype == torch.int32
    assert mb.side["returns"].dtype == torch.float64


@pytest.mark.parametrize("ai", range(len(ALIGNS)))
def test_the_reader_gives_side_columns_as_written(tmp_path, ai):
    seqs, side, bins, path = _slabs(tmp_path, ALIGNS[ai])
    m = SlabManifest.read(path)
    r = SlabReader(m, SlabIndex.build(m), cache=1)
    assert [c.name for c in r.side_columns] == ["old_logprobs", "returns", "support"]
    for b, members in enumerate(bins):
        row = r.row(b)
        starts = np.concatenate(([0], np.cumsum(row.seg_padded)[:-1]))
        for (c, values) in side:
            got = row.side[c.name]
            assert got.dtype == c.np_dtype and got.shape[0] == row.input_ids.size
            covered = np.zeros(got.shape[0], bool)
            for si, st in zip(members, starts):
                L = len(seqs[si][0])
                assert np.array_equal(got[st:st + L], values[si])
                covered[st:st + L] = True
            assert (got[~covered] == c.fill).all()  # every pad: gaps, tail, fixed-length fill


@pytest.mark.parametrize("budget", [None, 256])
@pytest.mark.parametrize("ai", range(len(ALIGNS)))
def test_every_cp_rank_gets_its_side_values_and_the_online_batch_is_the_same(tmp_path, ai, budget):
    from packtool.online.thd import thd_batch
    align = ALIGNS[ai]
    seqs, side, bins, path = _slabs(tmp_path, align, seed=ai + 1)
    full = PackedSlabDataset(path, cp_size=1, grad_accum=3, micro_batch_tokens=budget)
    plans = full.plan(epoch=0)
    merged = 0
    for r in range(2):
        ds = PackedSlabDataset(path, cp_size=2, cp_rank=r, grad_accum=3, micro_batch_tokens=budget)
        for plan in plans:
            for mb_slabs in plan.micro_batches:
                mb = ds.load(mb_slabs)
                _check_batch(mb)
                _check_batch(full.load(mb_slabs))
                src = [i for s in mb_slabs for i in bins[s]]
                merged += len(mb_slabs) > 1
                one = budget is None  # a single slab keeps its fixed-length fill
                online = thd_batch([torch.as_tensor(seqs[i][0]) for i in src],
                                   align if one else _unfixed(align), [torch.as_tensor(seqs[i][1]) for i in src],
                                   side={c.name: [torch.as_tensor(v[i]) for i in src] for c, v in side},
                                   side_fill={c.name: c.fill for c, _ in side}, cp_size=2, cp_rank=r)
                for part in ("side", "side_targets"):
                    for k, v in getattr(mb, part).items():
                        assert torch.equal(v, getattr(online, part)[k]), (part, k)
                assert torch.equal(mb.labels, online.labels) and torch.equal(mb.segment, online.segment)
                assert torch.equal(mb.seg_loss_tokens, online.seg_loss_tokens)
    assert budget is None or merged


def _unfixed(align):
    import dataclasses
    return dataclasses.replace(align, fixed_length=None)


def _manifest_agrees(path):
    """Rewrite the manifest's shard sizes and checksums to what is on disk (an edit made whole)."""
    import json
    import os
    from packtool.slabs.names import MANIFEST
    from packtool.tokenize.checksum import shard_checksum
    m = json.loads(open(f"{path}/{MANIFEST}").read())
    for e in m["shards"]:
        f = f"{path}/{e['file']}"
        e["bytes"], e["xxh3_128"] = os.path.getsize(f), shard_checksum(f)
    with open(f"{path}/{MANIFEST}", "w") as fh:
        json.dump(m, fh)


def test_a_side_column_shorter_than_its_slab_is_named(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    seqs, side, bins, path = _slabs(tmp_path, ALIGNS[0])
    f = f"{path}/slabs-00000.parquet"
    t = pq.read_table(f)
    col = t.column("returns").to_pylist()
    col[1] = col[1][:-1]
    t = t.set_column(t.schema.get_field_index("returns"), "returns", pa.array(col, type=pa.list_(pa.float64())))
    pq.write_table(t, f, row_group_size=3)
    _manifest_agrees(path)  # past the open-time size and checksum checks: the row check must catch it
    ds = PackedSlabDataset(path, cp_size=1)
    with pytest.raises(ValueError, match="row 1: side column 'returns' has .* values for .* tokens"):
        ds.load([1])
