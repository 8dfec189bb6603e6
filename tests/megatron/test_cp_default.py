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
from packtool.megatron.model import GPTShape  # noqa: E402
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


# RB-4: the rule is for a model of CP 2 given a cp=2 batch without its group (a CP-1 model refuses the
# batch earlier, for the CP mismatch, in words that hold "cp_group" too): its own words, at every door
@pytest.mark.parametrize("door", sorted(DOORS))
def test_a_cp_batch_without_cp_group_is_refused_naming_cp_group(packed, door):
    mb = DOORS[door](packed)
    assert mb.params.cp_size == 2 and mb.params.cp_group is None
    q = torch.zeros(mb.input_ids.shape[1], SHAPE.heads, SHAPE.hidden // SHAPE.heads)
    with pytest.raises(PacktoolConfigError) as e:
        _attention(2)(q, q, q, None, packed_seq_params=mb.params)
    msg = str(e.value)
    assert "no cp_group to gather" in msg and "pass cp_group" in msg and "\n" not in msg, msg


def _attention(model_cp):
    from dataclasses import replace as dc_replace

    from packtool.megatron.attention import PackedCoreAttention
    from packtool.megatron.model import transformer_config
    cfg = dc_replace(transformer_config(SHAPE, torch.float32, torch.device("cpu")), context_parallel_size=model_cp)
    return PackedCoreAttention(cfg, 1, None, "self")


# S49B-3: in a CP=2 job (megatron's parallel_state holding a CP group of 2), a dataset built without
# cp arguments (the DDP habit; RL.md's loop never shows the constructor) handed every CP rank the
# whole slab, a build_gpt(cp=2) model ran it without a word, and the DP x CP gradient sum was twice
# the objective's. The dataset now takes the CP the process runs, and a model refuses a batch made
# for another CP from whichever door made it.
# RB-9: the DP group is taken by the same door (0c104ff, docs/TRAINING.md), which no test held:
# a dataset built bare in a DP job reads its rank's 1/dp of the slabs, not all of them
@pytest.mark.parametrize("kind", ["context", "data"])
def test_a_dataset_with_no_group_arguments_takes_the_groups_the_process_runs(packed, monkeypatch, kind):
    from megatron.core import parallel_state as ps
    groups = thread_cp_groups(2)
    monkeypatch.setattr(ps, "model_parallel_is_initialized", lambda: True)
    for k in ("context", "data"):  # the other kind runs one rank
        monkeypatch.setattr(ps, f"get_{k}_parallel_world_size", (lambda: 2) if k == kind else (lambda: 1))
        monkeypatch.setattr(ps, f"get_{k}_parallel_rank", (lambda: 1) if k == kind else (lambda: 0))
        monkeypatch.setattr(ps, f"get_{k}_parallel_group", (lambda: groups[1]) if k == kind else (lambda: None))
    ds = PackedSlabDataset(packed, seed=0)
    if kind == "context":
        mb = ds.load([0])
        assert (ds.cp_size, ds.cp_rank, ds.cp_group) == (2, 1, groups[1])
        assert mb.input_ids.shape[1] * 2 == int(mb.params.cu_seqlens_q_padded[-1])  # rank 1's chunks, not the slab
        return
    assert (ds.dp_size, ds.dp_rank, ds.dp_group, ds.cp_size) == (2, 1, groups[1], 1)
    given = PackedSlabDataset(packed, seed=0, dp_rank=1, dp_size=2, dp_group=groups[1])
    mine = [sorted(i for mb in s.micro_batches for i in mb) for s in ds.plan(0)]
    assert mine == [sorted(i for mb in s.micro_batches for i in mb) for s in given.plan(0)]
    assert 0 < sum(map(len, mine)) < len(ds.index)  # its share, not every slab


@pytest.mark.parametrize("batch_cp,model_cp", [(1, 2), (2, 1)])
def test_a_model_refuses_a_batch_made_for_another_cp(packed, batch_cp, model_cp):
    groups = thread_cp_groups(2)
    ds = PackedSlabDataset(packed, cp_size=batch_cp, cp_group=groups[0] if batch_cp > 1 else None)
    mb = ds.load([0])
    attn = _attention(model_cp)
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


# RB-1: make_thd_batch (exported) never asked the group: make_thd_batch(cp=2, cp_group=G) on CP rank 1
# sliced rank 0's chunks and the model's CP check passed. Every door that makes a micro-batch, given
# the group of CP rank 1 alone, makes rank 1's; a contrary rank is refused naming both.
def _given_dataset(packed, **kw):
    return PackedSlabDataset(packed, **kw).load([0])


def _given_make_thd_batch(packed, **kw):
    full = _slab(packed)
    seg = np.diff(full.params.cu_seqlens_q_padded.numpy())
    kw = {{"cp_size": "cp"}.get(k, k): v for k, v in kw.items()}
    return make_thd_batch(full.input_ids[0].numpy(), (full.loss_weight[0] > 0).numpy().astype(np.uint8),
                          np.asarray(full.seg_real), seg, **kw)


def _given_online(packed, **kw):
    from packtool.online import thd_batch
    return thd_batch([torch.arange(1, 20), torch.arange(3, 14)], ALIGN, **kw)


GIVEN_DOORS = {"PackedSlabDataset": _given_dataset, "make_thd_batch": _given_make_thd_batch,
               "online thd_batch": _given_online}


@pytest.mark.parametrize("door", sorted(GIVEN_DOORS))
def test_every_door_given_cp_group_alone_makes_that_ranks_chunks(packed, door):
    groups = thread_cp_groups(2)
    make = GIVEN_DOORS[door]
    got, ref = make(packed, cp_group=groups[1]), make(packed, cp_rank=1, cp_size=2, cp_group=groups[1])
    assert (got.params.cp_rank, got.params.cp_size) == (1, 2), door
    torch.testing.assert_close(got.input_ids, ref.input_ids, rtol=0, atol=0)
    torch.testing.assert_close(got.labels, ref.labels, rtol=0, atol=0)
    with pytest.raises(PacktoolConfigError, match="cp_rank=1 but this process is rank 0 of cp_group"):
        make(packed, cp_rank=1, cp_group=groups[0])
