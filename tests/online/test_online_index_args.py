"""Issue 23 class 6: every index-taking argument of packtool.online refuses an index that is not
one of its range with one OnlinePackError naming the argument, the index and the range.
thd_batches raised a raw IndexError for a micro-batch index past input_ids (or a loss_mask
shorter than input_ids), read -1 as the last sequence and int(1.7) as sequence 1 (a wrong
sequence trained on without a word), True as sequence 1, and a bare int as a micro-batch was a
TypeError. StepBins.rank_bins / rank_rows and cp_rank were already refused: they stay in the
class as its other members."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="online batches are torch tensors")

from packtool.align import Alignment  # noqa: E402
from packtool.online import OnlinePackError, pack_step, pack_tensors  # noqa: E402

AL = Alignment(capacity=64)
IDS = [torch.arange(1, 6), torch.arange(1, 4), torch.arange(1, 8)]  # 3 sequences: indices 0..2
RANGE = "from 0 to 2"


def _thd_batches(micro_batches, **kw):
    pytest.importorskip("megatron.core", reason="ThdBatch carries megatron's PackedSeqParams")
    from packtool.online.thd import thd_batches
    return thd_batches(IDS, AL, micro_batches, cp_size=1, **kw)


def _thd_batch(**kw):
    pytest.importorskip("megatron.core", reason="ThdBatch carries megatron's PackedSeqParams")
    from packtool.online import thd_batch
    return thd_batch(IDS, AL, **kw)


def _bins():
    return pack_step([5, 3, 7], AL, dp=2)


# case -> (call, words the one line must hold: the argument, the index, the range)
CASES = {
    "thd_batches index past the end": (lambda: _thd_batches([[0, 1], [2, 3]]), ("micro_batches[1][1]", "3", RANGE)),
    "thd_batches index far past": (lambda: _thd_batches([[10**6]]), ("micro_batches[0][0]", "1000000", RANGE)),
    "thd_batches index beyond int64": (lambda: _thd_batches([[2**70]]), ("micro_batches[0][0]", str(2**70), RANGE)),
    "thd_batches negative index": (lambda: _thd_batches([[0, -1]]), ("micro_batches[0][1]", "-1", RANGE)),
    "thd_batches float index": (lambda: _thd_batches([[0, 1.7]]), ("micro_batches[0]", "float", RANGE)),
    "thd_batches float tensor": (lambda: _thd_batches([torch.tensor([0.0, 1.0])]), ("micro_batches[0]", "float", RANGE)),
    "thd_batches bool index": (lambda: _thd_batches([[True]]), ("micro_batches[0]", "bool", RANGE)),
    "thd_batches int tensor past": (lambda: _thd_batches([torch.tensor([2, 5])]), ("micro_batches[0][1]", "5", RANGE)),
    "thd_batches int for a list": (lambda: _thd_batches([0, 1]), ("micro_batches[0]", "shape ()", RANGE)),
    "thd_batches not a list": (lambda: _thd_batches(None), ("micro_batches", "NoneType")),
    "thd_batches short loss_mask": (lambda: _thd_batches([[2]], loss_mask=[torch.ones(5)]), ("loss_mask", "1", "3 sequences")),
    "rank_bins past dp": (lambda: _bins().rank_bins(2), ("rank 2", "0 to 1")),
    "rank_bins negative": (lambda: _bins().rank_bins(-1), ("rank -1", "0 to 1")),
    "rank_rows past dp": (lambda: _bins().rank_rows(5), ("rank 5", "0 to 1")),
    "pack_tensors cp_rank": (lambda: pack_tensors(IDS, Alignment(cp=2, capacity=64), cp_rank=2), ("cp_rank", "2", "0..1")),
    "thd_batch cp_rank": (lambda: _thd_batch(cp_size=2, cp_rank=-1), ("cp_rank", "-1")),
    "thd_batches cp_rank": (lambda: _thd_batches([[0]], cp_rank=3), ("cp_rank", "3")),
}


@pytest.mark.parametrize("case", CASES)
def test_an_index_out_of_its_range_is_one_line_naming_argument_index_and_range(case):
    call, words = CASES[case]
    with pytest.raises(OnlinePackError) as e:
        call()
    said = str(e.value)
    assert "\n" not in said
    for w in words:
        assert w in said, (w, said)


@pytest.mark.parametrize("mb", [[0, 2], (2, 0), torch.tensor([0, 2]), [torch.tensor(0), torch.tensor(2)],
                                _bins().rank_bins(0)[0]])
def test_every_index_kind_a_caller_holds_still_picks_its_sequences(mb):
    """lists, tuples, integer tensors (and their 0-d items) and rank_bins' int64 arrays."""
    got = _thd_batches([mb, []])
    assert got[1] is None
    want = sum(len(IDS[int(i)]) for i in mb)
    assert got[0].num_tokens == want


def test_no_sequences_and_an_index():
    pytest.importorskip("megatron.core", reason="ThdBatch carries megatron's PackedSeqParams")
    from packtool.online.thd import thd_batches
    with pytest.raises(OnlinePackError, match=r"micro_batches\[0\] holds sequence indices, but input_ids holds no"):
        thd_batches([], AL, [[0]], cp_size=1)
    assert thd_batches([], AL, [[]], cp_size=1) == [None]


@pytest.mark.parametrize("item", [True, False, torch.tensor(True)], ids=["True", "False", "torch True"])
def test_a_bool_among_int_indices_is_not_sequence_1(item):
    """S39-4's class: `[0, True]` became int64 [0, 1] (sequence 1 trained on without a word)."""
    with pytest.raises(OnlinePackError) as e:
        _thd_batches([[0, item]])
    assert "micro_batches[0][1] is a bool" in str(e.value) and "\n" not in str(e.value), str(e.value)
