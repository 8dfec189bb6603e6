"""Token ids that do not fit what a kernel reads (stop 38's "Left" 3): every public entry of
packtool.kernels and packtool.online that takes ids refuses, in one line naming the argument,
  - uint64 ids, by dtype (ids past 2^63-1 wrap to negatives when widened to int64; a value
    check would cost a host sync in the kernels' hot path): pack_tensors / thd_batch took them
    to torch's NotImplementedError ("min_all" not implemented for 'UInt64'), and uint16/uint32
    likewise;
  - a sampled id past the support's int32 (the support checks compare the sampled id cast to the
    support's dtype): 2^32 + 5 was scored as id 5 without a word. That one is a value check,
    folded into the checks' one host sync (the Triton path's count read too)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from packtool.align import Alignment  # noqa: E402
from packtool.errors import PacktoolError  # noqa: E402

V, H = 16, 8
BIG = (1 << 63) + 5


def _u64(*ids):
    return torch.tensor(ids, dtype=torch.uint64)


def _ce(ids):
    from packtool.kernels.lm_head import fused_linear_cross_entropy
    return fused_linear_cross_entropy(torch.randn(3, H), torch.randn(V, H), ids, impl="torch")


def _lp(ids):
    from packtool.kernels.lm_head import fused_linear_logprobs_entropy
    return fused_linear_logprobs_entropy(torch.randn(3, H), torch.randn(V, H), ids, impl="torch")


SUPPORT = torch.tensor([[1, 2, -1], [3, 4, -1], [5, 6, -1]], dtype=torch.int32)


def _support_sampled(ids):
    from packtool.kernels.support_logprob import support_logprob
    return support_logprob(torch.randn(3, H), torch.randn(V, H), ids, SUPPORT)


def _support_rows(ids):
    from packtool.kernels.support_logprob import support_logprob
    rows = torch.stack([ids, ids, ids], 1)
    return support_logprob(torch.randn(3, H), torch.randn(V, H), torch.tensor([1, 3, 5]), rows)


def _check_support(ids):
    from packtool.kernels.support_check import check_support
    return check_support(ids, SUPPORT.long(), V, 0, V)


def _pack_tensors(ids):
    from packtool.online import pack_tensors
    return pack_tensors([ids], Alignment(capacity=64))


def _pack_tensors_flat(ids):
    from packtool.online import pack_tensors
    return pack_tensors(ids, Alignment(capacity=64), lengths=[ids.numel()])


def _thd_batch(ids):
    pytest.importorskip("megatron.core")
    from packtool.online import thd_batch
    return thd_batch([ids], Alignment(capacity=64))


def _hf_labels(ids):
    from packtool.online.support import support_logprobs_hf
    return support_logprobs_hf({"labels": ids[None], "shift_support": SUPPORT[None]}, torch.randn(1, 3, H),
                               torch.randn(V, H))


# entry -> (the argument named, the call with ids)
ENTRIES = {
    "fused_linear_cross_entropy": ("targets", _ce),
    "fused_linear_logprobs_entropy": ("targets", _lp),
    "support_logprob sampled": ("sampled", _support_sampled),
    "support_logprob support": ("support", _support_rows),
    "check_support": ("sampled", _check_support),
    "pack_tensors": ("input_ids[0]", _pack_tensors),
    "pack_tensors flat": ("input_ids", _pack_tensors_flat),
    "thd_batch": ("input_ids[0]", _thd_batch),
    "support_logprobs_hf": ("batch['labels']", _hf_labels),
}


@pytest.mark.parametrize("entry", ENTRIES)
def test_uint64_ids_are_refused_by_dtype_naming_the_argument(entry):
    name, call = ENTRIES[entry]
    with pytest.raises(PacktoolError) as e:
        call(_u64(1, 3, BIG))
    msg = str(e.value)
    assert name in msg and "uint64" in msg and "2^63" in msg and "\n" not in msg, msg


@pytest.mark.parametrize("dtype", ["uint16", "uint32"])
@pytest.mark.parametrize("entry", ["pack_tensors", "pack_tensors flat", "thd_batch"])
def test_the_unsigned_ids_torch_cannot_compute_with_are_refused_naming_input_ids(entry, dtype):
    name, call = ENTRIES[entry]
    if not hasattr(torch, dtype):
        pytest.skip(f"this torch has no {dtype}")
    with pytest.raises(PacktoolError) as e:
        call(torch.tensor([1, 3, 5], dtype=getattr(torch, dtype)))
    assert name in str(e.value) and dtype in str(e.value), e.value


def test_numpy_uint64_ids_are_refused_too():
    with pytest.raises(PacktoolError, match=r"input_ids\[0\] .*uint64"):
        _pack_tensors(np.array([1, 3, BIG], dtype=np.uint64))


# a sampled id the support's int32 does not hold: (entry, the argument named, the call)
PAST_INT32 = {
    "support_logprob": ("sampled", lambda: _support_sampled(torch.tensor([1, 3, (1 << 32) + 5]))),
    "check_support": ("sampled", lambda: __import__("packtool.kernels.support_check", fromlist=["x"]).check_support(
        torch.tensor([1, 3, (1 << 32) + 5]), SUPPORT, V, 0, V)),
    "check_support uint32": ("sampled", lambda: __import__("packtool.kernels.support_check", fromlist=["x"])
                             .check_support(torch.tensor([1, 3, (1 << 32) - 1], dtype=torch.uint32),
                                            torch.tensor([[1, 2, -1], [3, 4, -1], [-1, -1, -1]], dtype=torch.int32),
                                            V, 0, V)),
    "support_logprobs_hf": ("batch['labels']", lambda: _hf_labels(torch.tensor([-100, 3, (1 << 32) + 5]))),
}


@pytest.mark.parametrize("entry", PAST_INT32)
def test_a_sampled_id_past_the_supports_int32_is_refused_not_wrapped_onto_a_real_id(entry):
    name, call = PAST_INT32[entry]
    with pytest.raises(PacktoolError) as e:
        call()
    msg = str(e.value)
    assert name in msg and "does not fit the support's torch.int32" in msg and "\n" not in msg, msg
