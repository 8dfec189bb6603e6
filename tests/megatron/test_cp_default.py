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


# S49B-3: in a CP=2 job (megatron's parallel_state holding a CP group of 2), a dataset built without
# cp arguments (the DDP habit; RL.md's loop never shows the constructor) handed every CP rank the
# whole slab, a build_gpt(cp=2) model ran it without a word, and the DP x CP gradient sum was twice
# the objective's. The dataset now takes the CP the process runs, and a model refuses a batch made
# for another CP from whichever door made it.
def test_a_dataset_with_no_cp_arguments_takes_the_cp_the_process_runs(packed, monkeypatch):
    from megatron.core import parallel_state as ps
    groups = thread_cp_groups(2)
    monkeypatch.setattr(ps, "model_parallel_is_initialized", lambda: True)
    monkeypatch.setattr(ps, "get_context_parallel_world_size", lambda: 2)
    monkeypatch.setattr(ps, "get_context_parallel_rank", lambda: 1)
    monkeypatch.setattr(ps, "get_context_parallel_group", lambda: groups[1])
    ds = PackedSlabDataset(packed, seed=0)
    mb = ds.load([0])
    assert (ds.cp_size, ds.cp_rank, ds.cp_group) == (2, 1, groups[1])
    assert mb.input_ids.shape[1] * 2 == int(mb.params.cu_seqlens_q_padded[-1])  # rank 1's chunks, not the slab


@pytest.mark.parametrize("batch_cp,model_cp", [(1, 2), (2, 1)])
def test_a_model_refuses_a_batch_made_for_another_cp(packed, batch_cp, model_cp):
    from dataclasses import replace as dc_replace

    from packtool.megatron.attention import PackedCoreAttention
    from packtool.megatron.model import transformer_config
    groups = thread_cp_groups(2)
    ds = PackedSlabDataset(packed, cp_size=batch_cp, cp_group=groups[0] if batch_cp > 1 else None)
    mb = ds.load([0])
    cfg = dc_replace(transformer_config(SHAPE, torch.float32, torch.device("cpu")), context_parallel_size=model_cp)
    attn = PackedCoreAttention(cfg, 1, None, "self")
    t = mb.input_ids.shape[1]
    q = torch.zeros(t, SHAPE.heads, SHAPE.hidden // SHAPE.heads)
    with pytest.raises(PacktoolConfigError) as e:
        attn(q, q, q, None, packed_seq_params=mb.params)
    msg = str(e.value)
    assert f"cp_size={batch_cp}" in msg and f"context_parallel_size={model_cp}" in msg and "\n" not in msg, msg


def _first_step(ds):
    step = next(iter(ds.steps(max_steps=1)))
    return [mb.input_ids for mb in step.micro_batches if mb is not None]


# S49B-5 (high): a group given without its rank (cp_group; dp_size + dp_group) left the rank 0 on every
# process, each training rank 0's share; dp_group alone was not even taken for the size. One rule for
# every group (params.group_coords): the group supplies its size and this process's rank; a contrary one
# given is refused naming both. Each subset of (rank, size, group), for DP and CP, against the full one.
GIVEN = {"group only": ("group",), "size and group": ("size", "group"), "rank and group": ("rank", "group"),
         "all three": ("rank", "size", "group")}


@pytest.mark.parametrize("given", list(GIVEN))
@pytest.mark.parametrize("axis", ["cp", "dp"])
def test_a_dataset_given_a_group_takes_its_rank_and_size(packed, given, axis):
    groups = thread_cp_groups(2)
    full = {f"{axis}_rank": 1, f"{axis}_size": 2, f"{axis}_group": groups[1]}
    kw = {k: v for k, v in full.items() if k.split("_")[1] in GIVEN[given]}
    ds, ref = PackedSlabDataset(packed, **kw), PackedSlabDataset(packed, **full)
    assert (getattr(ds, f"{axis}_rank"), getattr(ds, f"{axis}_size")) == (1, 2), kw
    for a, b in zip(_first_step(ds), _first_step(ref), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("axis", ["cp", "dp"])
def test_a_rank_or_size_against_the_group_is_refused_naming_both(packed, axis):
    groups = thread_cp_groups(2)
    with pytest.raises(PacktoolConfigError, match=f"{axis}_rank=1 but this process is rank 0 of {axis}_group"):
        PackedSlabDataset(packed, **{f"{axis}_rank": 1, f"{axis}_group": groups[0]})
    with pytest.raises(PacktoolConfigError, match=f"{axis}_size=4 but {axis}_group has 2 ranks"):
        PackedSlabDataset(packed, **{f"{axis}_size": 4, f"{axis}_group": groups[0]})


def test_online_thd_batch_given_cp_group_takes_its_rank():
    from packtool.online import thd_batch
    groups = thread_cp_groups(2)
    seqs = [torch.arange(1, 20), torch.arange(3, 14)]
    got, ref = thd_batch(seqs, ALIGN, cp_group=groups[1]), thd_batch(seqs, ALIGN, cp_rank=1, cp_group=groups[1])
    assert got.params.cp_rank == 1
    torch.testing.assert_close(got.input_ids, ref.input_ids, rtol=0, atol=0)
