"""Issue 23 classes 5 and 6: `packtool.online` checks its arguments as the CLI checks its
flags: every wrong value is one OnlinePackError (a ValueError) naming the argument, never a
TypeError, a silent truncation or an empty answer."""
from __future__ import annotations

import numpy as np
import pytest

from packtool.align import Alignment
from packtool.online import OnlinePackError, make_seq_packer, micro_batches, pack_step

A = Alignment(capacity=64)


def _pack_tensors(seqs, **kw):
    import torch
    from packtool.online import pack_tensors
    return pack_tensors([torch.tensor(x) for x in seqs], Alignment(capacity=64, cp=2), **kw)


BAD = {
    "dp=2.0": (lambda: pack_step([5, 6, 7, 8], capacity=64, dp=2.0), "dp"),
    "dp=True": (lambda: pack_step([5, 6], capacity=64, dp=True), "dp"),
    "min_bin_count='2'": (lambda: pack_step([5, 6], capacity=64, min_bin_count="2"), "min_bin_count"),
    "bin_count_multiple=0": (lambda: pack_step([5, 6], capacity=64, bin_count_multiple=0), "bin_count_multiple"),
    "attn_coef=nan": (lambda: pack_step([5, 6], capacity=64, attn_coef=float("nan")), "attn_coef"),
    "SeqPacker min_bin_count='2'": (lambda: make_seq_packer("balanced", 64, "2"), "min_bin_count"),
    "SeqPacker bin_count_multiple=1.5": (lambda: make_seq_packer("balanced", 64, 1, 1.5), "bin_count_multiple"),
    "SeqPacker bin_capacity=0": (lambda: make_seq_packer("balanced", 0), "bin_capacity must be a positive"),
    "SeqPacker bin_capacity=64.0": (lambda: make_seq_packer("first_fit_decreasing", 64.0), "bin_capacity"),
    "pack_step capacity=0": (lambda: pack_step([5, 6], capacity=0), "capacity must be a positive"),
    "budget=nan": (lambda: micro_batches([5, 6], A, float("nan")), "budget"),
    "budget=2.5": (lambda: micro_batches([5, 6], A, 2.5), "budget"),
    "budget='64'": (lambda: micro_batches([5, 6], A, "64"), "budget"),
    "pad_to=1.5": (lambda: micro_batches([5, 6], A, 64, pad_to=1.5), "pad_to"),
    "uint64 2^64-1": (lambda: pack_step(np.array([5, 2**64 - 1], np.uint64), capacity=64), "18446744073709551615"),
    "float lengths": (lambda: pack_step([5.5, 6], capacity=64), "integer"),
    "rank_bins(5) with dp=2": (lambda: pack_step([5, 6, 7, 8], capacity=64, dp=2).rank_bins(5), "rank 5"),
    "rank_bins(-1) with dp=2": (lambda: pack_step([5, 6, 7, 8], capacity=64, dp=2).rank_bins(-1), "rank -1"),
    "negative length, ffd": (lambda: pack_step([5, -3], capacity=64), "lengths[1] is -3"),
    "negative length, least-loaded": (lambda: pack_step([5, -3], capacity=64, algorithm="least-loaded"),
                                      "lengths[1] is -3"),
    "negative length, bfd": (lambda: pack_step([5, -3], capacity=64, algorithm="bfd"), "lengths[1] is -3"),
    "zero length, bfd": (lambda: pack_step([5, 0, 7], capacity=64, algorithm="bfd"), "sequence 1 has length 0"),
    "zero length, mffd": (lambda: pack_step([5, 0, 7], capacity=64, algorithm="mffd"), "sequence 1 has length 0"),
    "zero length, balanced": (lambda: pack_step([5, 0, 7], capacity=64, algorithm="balanced"),
                              "sequence 1 has length 0"),
    "pack_tensors [2, 3] sequence": (lambda: _pack_tensors([[[1, 2, 3], [4, 5, 6]]]), "input_ids[0] has shape (2, 3)"),
    "pack_tensors cp_rank=5": (lambda: _pack_tensors([[1, 2, 3]], cp_rank=5), "cp_rank must be in 0..1"),
    "pack_tensors cp_rank=1.0": (lambda: _pack_tensors([[1, 2, 3]], cp_rank=1.0), "cp_rank"),
    "rank_rows(2.0) with dp=2": (lambda: pack_step([5, 6, 7, 8], capacity=64, dp=2).rank_rows(2.0), "rank 2.0"),
}


class TestOnlineArguments:
    @pytest.mark.parametrize("case", sorted(BAD))
    def test_refused_naming_the_argument(self, case):
        call, needle = BAD[case]
        with pytest.raises(OnlinePackError) as e:
            call()
        msg = str(e.value)
        assert needle in msg and "\n" not in msg, msg
        assert "length -1" not in msg  # a uint64 length is never called negative
        assert "--" not in msg  # a library call is answered in its own argument names, not CLI flags

    def test_good_values_still_pass(self):
        b = pack_step(np.array([5, 6, 7, 8], np.uint64), capacity=64, dp=np.int64(2), min_bin_count=2)
        assert sorted(np.concatenate([*b.rank_bins(0), *b.rank_bins(1)]).tolist()) == [0, 1, 2, 3]
        assert micro_batches([5, 6], A, 64, pad_to=np.int32(3)).num_micro_batches == 3


class TestThdIds:
    """thd_batch cast float ids to int64: 1.7 became token 1 without a word."""

    @pytest.mark.parametrize("form", ["list of float tensors", "flat float tensor", "nested python floats",
                                      "float lengths"])
    def test_refused(self, form):
        torch = pytest.importorskip("torch")
        pytest.importorskip("megatron.core")
        from packtool.online.thd import thd_batch
        ids, kw = {"list of float tensors": ([torch.tensor([1.7, 2.0])], {}),
                   "flat float tensor": (torch.tensor([1.7, 2.0]), {"lengths": [2]}),
                   "nested python floats": ([[1.7, 2.0]], {}),
                   "float lengths": (torch.tensor([1, 2]), {"lengths": [1.5, 0.5]})}[form]
        with pytest.raises(OnlinePackError, match="integer"):
            thd_batch(ids, A, **kw)
