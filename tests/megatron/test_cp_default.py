"""S48B-4: `PackedSlabDataset(path)` in a process that runs no context parallelism (no cp_size,
no cp_group) on an output packed with `--cp 2` handed out CP rank 0's half of every segment with
no note (cp_size defaulted to the packed cp), so a loss over the batch trained on half of each
sequence, and packtool's own attention then died in `AttributeError: 'NoneType' object has no
attribute 'all_gather'`. Now, with no cp_group and no cp_size, the dataset reads whole slabs
(cp_size 1, as `packtool train` runs one process), and a micro-batch built for CP > 1 that
carries no cp_group is one packtool error naming cp_group, from whichever door built it."""
from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("megatron.core")

from megatron_slabs import greedy_bins, random_sequences, thread_cp_groups, write_slab_dir  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.errors import PacktoolConfigError  # noqa: E402
from packtool.megatron.dataset import PackedSlabDataset  # noqa: E402
from packtool.megatron.model import GPTShape, build_gpt, token_losses  # noqa: E402
from packtool.megatron.parallel import init_parallel  # noqa: E402
from packtool.megatron.thd import make_thd_batch  # noqa: E402

ALIGN = Alignment(cp=2, capacity=64)
SHAPE = GPTShape(layers=1, hidden=32, heads=2, ffn=64, vocab=128, max_seq=512)


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> str:
    seqs = random_sequences(8, 5, 25, seed=3)
    return str(write_slab_dir(str(tmp_path_factory.mktemp("cp2") / "o"), seqs, greedy_bins(seqs, ALIGN), ALIGN))


# a script that runs no CP: the dataset made as its docs' first lines make it
NO_CP = {"no arguments": {}, "a DDP rank": {"dp_rank": 1, "dp_size": 2}, "seed and budget": {
    "seed": 4, "grad_accum": 2, "micro_batch_tokens": 256}}


@pytest.mark.parametrize("kw", sorted(NO_CP))
def test_no_cp_group_reads_whole_slabs(packed, kw):
    ds = PackedSlabDataset(packed, **NO_CP[kw])
    assert ds.cp_size == 1
    for step in ds.steps(max_steps=ds.steps_per_epoch()):
        batches = [mb for mb in step.micro_batches if mb is not None]
        for mb in batches:  # every position of the slab, not CP rank 0's chunks
            assert mb.input_ids.shape[1] == int(mb.params.cu_seqlens_q_padded[-1]), kw
        assert sum(float(mb.loss_weight.sum()) for mb in batches) == step.loss_tokens, kw


def test_cp_group_still_sets_the_cp(packed):
    groups = thread_cp_groups(2)
    ds = PackedSlabDataset(packed, cp_rank=1, cp_group=groups[1])
    mb = ds.load([0])
    assert ds.cp_size == 2 and mb.input_ids.shape[1] * 2 == int(mb.params.cu_seqlens_q_padded[-1])


def test_a_cp_rank_past_0_with_no_cp_is_refused_naming_cp_size(packed):
    with pytest.raises(PacktoolConfigError) as e:
        PackedSlabDataset(packed, cp_rank=1)
    assert "cp_size" in str(e.value) and "\n" not in str(e.value), str(e.value)


def _slab(packed):
    return PackedSlabDataset(packed, cp_size=1).load([0])


def _by_dataset(packed):
    return PackedSlabDataset(packed, cp_size=2).load([0])


def _by_make_thd_batch(packed):
    full = _slab(packed)
    seg = np.diff(full.params.cu_seqlens_q_padded.numpy())
    real = np.asarray(full.seg_real)
    return make_thd_batch(full.input_ids[0].numpy(), (full.loss_weight[0] > 0).numpy().astype(np.uint8),
                          real, seg, cp=2, cp_rank=0)


def _by_online(packed):
    from packtool.online import thd_batch
    return thd_batch([torch.arange(1, 20), torch.arange(3, 14)], ALIGN)


DOORS = {"PackedSlabDataset(cp_size=2)": _by_dataset, "make_thd_batch(cp=2)": _by_make_thd_batch,
         "online thd_batch(Alignment(cp=2))": _by_online}


@pytest.mark.parametrize("door", sorted(DOORS))
def test_a_cp_batch_without_cp_group_is_refused_naming_cp_group(packed, door):
    init_parallel(1, 1, "cpu")
    model = build_gpt(SHAPE, seed=1)
    mb = DOORS[door](packed)
    assert mb.params.cp_size == 2
    with pytest.raises(PacktoolConfigError) as e:
        token_losses(model, mb)
    msg = str(e.value)
    assert "cp_group" in msg and "cp_size" in msg and "\n" not in msg, msg
