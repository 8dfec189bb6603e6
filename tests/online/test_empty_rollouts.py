"""S45B-8: pack_step's ffd / least-loaded place empty rollouts (SkyRL's bins do) and the bfd
refusal advised them, yet pack_tensors / thd_batch refused every bin holding one ("drop empty
rollouts before batching"), a DP rank's bin of empty rollouts only included: the advised path
crashed a step later. One rule now: an empty rollout is a segment of no token in every batch
builder (the other sequences' tensors as without it, segment numbers kept); a micro-batch of
empty rollouts only is the zero-loss micro-batch (thd_batches: None; the single-batch calls
refuse it in one line)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="online batches are torch tensors")

from packtool.align import Alignment  # noqa: E402
from packtool.online import OnlinePackError, pack_step, pack_tensors  # noqa: E402

AL = Alignment(cp=2, capacity=64)
EMPTY = torch.zeros(0, dtype=torch.long)


def _thd_batch(seqs, al, **kw):
    pytest.importorskip("megatron.core", reason="ThdBatch carries megatron's PackedSeqParams")
    from packtool.online import thd_batch
    return thd_batch(seqs, al, **kw)


ENTRIES = {"pack_tensors": pack_tensors, "thd_batch": _thd_batch}


def _side(seqs):
    return {"lp": [torch.full((len(t),), 0.5) for t in seqs], "adv": [torch.ones(len(t)) for t in seqs]}


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("where", [(0,), (1,), (3,), (0, 2), (0, 1, 3)], ids=str)
@pytest.mark.parametrize("cp_rank", [0, 1])
def test_an_empty_rollout_is_a_segment_of_no_token(entry, where, cp_rank):
    real = [torch.arange(1, 6), torch.arange(7, 10), torch.arange(11, 19)]
    seqs = list(real)
    for k in where:
        seqs.insert(k, EMPTY)
    got = ENTRIES[entry](seqs, AL, side=_side(seqs), cp_rank=cp_rank)
    want = ENTRIES[entry](real, AL, side=_side(real), cp_rank=cp_rank)
    for f in ("input_ids", "position_ids", "labels", "loss_weight"):
        assert torch.equal(getattr(got, f), getattr(want, f)), f
    for k in ("lp", "adv"):
        assert torch.equal(got.side_targets[k], want.side_targets[k])
    kept = [i for i in range(len(seqs)) if i not in where]  # segment numbers are the sequences' own
    assert got.seg_loss_tokens.tolist() == [0.0 if i in where else float(want.seg_loss_tokens[kept.index(i)])
                                           for i in range(len(seqs))]
    assert torch.equal(torch.unique(got.segment), torch.tensor(kept))


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("n", [1, 3])
def test_a_micro_batch_of_empty_rollouts_only_is_refused_in_one_line(entry, n):
    with pytest.raises(OnlinePackError) as e:
        ENTRIES[entry]([EMPTY] * n, AL)
    assert "\n" not in str(e.value) and "hold no token" in str(e.value) and "thd_batches gives None" in str(e.value)


@pytest.mark.parametrize("algorithm", ["ffd", "least-loaded"])
def test_every_bin_pack_step_places_is_batched_or_the_zero_loss_micro_batch(algorithm):
    pytest.importorskip("megatron.core", reason="ThdBatch carries megatron's PackedSeqParams")
    from packtool.online.thd import thd_batches
    lengths = [0, 0, 5, 0, 3]  # S45B-8's case and more: a rank's bin of empty rollouts only
    seqs = [torch.arange(1, n + 1) for n in lengths]
    step = pack_step(lengths, AL, dp=2, algorithm=algorithm)
    for r in range(2):
        bins = [b.tolist() for b in step.rank_bins(r)]
        out = thd_batches(seqs, AL, bins, side=_side(seqs), cp_size=1)
        for b, got in zip(bins, out):
            assert (got is None) == (sum(lengths[i] for i in b) == 0)
