"""Issue 23 classes 5 and 6 (S28-6, S28-11): every library entry that takes lengths, token ids
or counts refuses what is not an integer it can use, in one line naming the argument and the
range, as packtool's error type: `plan([5.7, 6])` truncated to 5, `pack_step(dp=10**19)` raised
a raw OverflowError, a uint64 2^64-1 length was called -1, True was read as 1."""
from __future__ import annotations

import numpy as np
import pytest

import packtool
from packtool.align import Alignment
from packtool.errors import PacktoolError
from packtool.inspection.planned import inspect_lengths
from packtool.online import StepPacker, make_seq_packer, micro_batches, pack_step
from packtool.planning.core import PackingConfig
from packtool.planning.sharded import plan_sharded

A = Alignment(capacity=64)


def _tensors(**kw):
    torch = pytest.importorskip("torch")
    from packtool.online import pack_tensors
    ids = kw.pop("ids", torch.arange(1, 12) if "lengths" in kw else [torch.arange(1, 6), torch.arange(1, 7)])
    return lambda: pack_tensors(ids, Alignment(capacity=64, cp=2), **kw)


# entry -> (call taking the array, the argument's name, a valid value)
ARRAYS = {
    "plan": (lambda v: packtool.plan(v, A), "lengths", [5, 6]),
    "inspect_lengths": (lambda v: inspect_lengths(v, A), "lengths", [5, 6]),
    "plan_sharded": (lambda v: plan_sharded(v, A, shard_rows=1), "lengths", [5, 6]),
    "pack_step": (lambda v: pack_step(v, capacity=64), "lengths", [5, 6]),
    "StepPacker.pack": (lambda v: StepPacker(capacity=64, dp=2).pack(v), "lengths", [5, 6]),
    "SeqPacker.pack": (lambda v: make_seq_packer("balanced", 64).pack(v), "sequence_lengths", [5, 6]),
    "SeqPacker.pack_arrays": (lambda v: make_seq_packer("first_fit_decreasing", 64).pack_arrays(v), "sequence_lengths", [5, 6]),
    "micro_batches seg_lens": (lambda v: micro_batches(v, A, 64), "seg_lens", [5, 6]),
    "micro_batches row_offsets": (lambda v: micro_batches([5, 6], A, 64, row_offsets=v), "row_offsets", [0, 2]),
    "pack_tensors lengths": (lambda v: _tensors(lengths=v)(), "lengths", [5, 6]),
}


def _bad(good: list) -> dict:
    last = len(good) - 1
    swap = lambda x: good[:last] + [x]  # noqa: E731
    return {"float": np.array(good, np.float64) + 0.5, "integral floats": [float(x) for x in good],
            "nan": swap(float("nan")), "bool": np.ones(len(good), bool), "negative": swap(-1),
            "uint64 2^64-1": np.array(swap(2**64 - 1), np.uint64), "python 10**19": swap(10**19),
            "python 10**30": swap(10**30), "int64 max (no footprint fits int64)": swap(2**63 - 1),
            "2-D": [good, good]}


CASES = [(e, b) for e in ARRAYS for b in _bad(ARRAYS[e][2])]


@pytest.mark.parametrize("entry,bad", CASES, ids=[f"{e}-{b}" for e, b in CASES])
def test_arrays_refuse_what_is_not_an_integer_in_range(entry, bad):
    call, name, good = ARRAYS[entry]
    call(good)  # the same entry takes the good value
    with pytest.raises(PacktoolError) as e:
        call(_bad(good)[bad])
    msg = str(e.value)
    assert "\n" not in msg and name in msg and "2^62" in msg, msg
    assert "has -1 tokens" not in msg and " -1:" not in msg or bad == "negative", msg  # 2^64-1 is not -1


@pytest.mark.parametrize("ids,needle", [("float", "float"), ("bool", "bool"), ("negative", "-3"),
                                        ("python 10**19", "input_ids[0]")])
def test_token_ids_refused(ids, needle):
    torch = pytest.importorskip("torch")
    value = {"float": [torch.tensor([1.7, 2.0])], "bool": [torch.tensor([True, False])],
             "negative": [torch.tensor([5, -3, 2])], "python 10**19": [[1, 10**19]]}[ids]
    with pytest.raises(PacktoolError) as e:
        _tensors(ids=value)()
    assert needle in str(e.value) and "input_ids" in str(e.value) and "\n" not in str(e.value)


def _rank(method, r):
    return lambda: getattr(pack_step([5, 6, 7, 8], capacity=64, dp=2), method)(r)


# (entry, argument) -> call with the value; each entry's integer arguments
SCALARS = {
    ("pack_step", "capacity"): lambda v: pack_step([5], capacity=v),
    ("pack_step", "dp"): lambda v: pack_step([5, 6], capacity=64, dp=v),
    ("pack_step", "min_bin_count"): lambda v: pack_step([5, 6], capacity=64, min_bin_count=v),
    ("pack_step", "bin_count_multiple"): lambda v: pack_step([5, 6], capacity=64, bin_count_multiple=v),
    ("SeqPacker", "bin_capacity"): lambda v: make_seq_packer("balanced", v),
    ("SeqPacker", "min_bin_count"): lambda v: make_seq_packer("balanced", 64, v),
    ("SeqPacker", "bin_count_multiple"): lambda v: make_seq_packer("balanced", 64, 1, v),
    ("micro_batches", "budget"): lambda v: micro_batches([5, 6], A, v),
    ("micro_batches", "pad_to"): lambda v: micro_batches([5, 6], A, 64, pad_to=v),
    ("rank_bins", "rank"): lambda v: _rank("rank_bins", v)(),
    ("rank_rows", "rank"): lambda v: _rank("rank_rows", v)(),
    ("pack_tensors", "cp_size"): lambda v: _tensors(cp_size=v)(),
    ("pack_tensors", "cp_rank"): lambda v: _tensors(cp_rank=v)(),
    ("pack_tensors", "pad_id"): lambda v: _tensors(pad_id=v)(),
    ("plan_sharded", "shard_rows"): lambda v: plan_sharded([5, 6], A, shard_rows=v),
    ("plan", "dp"): lambda v: PackingConfig(dp=v),
    ("plan", "seed"): lambda v: PackingConfig(seed=v),
    ("plan", "tp"): lambda v: Alignment(tp=v),
    ("plan", "cp"): lambda v: Alignment(cp=v),
    ("plan", "capacity"): lambda v: Alignment(capacity=v),
    ("plan", "fixed_length"): lambda v: Alignment(fixed_length=v),
}
HUGE = {"2^63": 2**63, "10**19": 10**19, "10**400": 10**400, "-1": -1}
SCALAR_CASES = [(k, h) for k in SCALARS for h in HUGE]


@pytest.mark.parametrize("key,huge", SCALAR_CASES, ids=[f"{e}-{a}-{h}" for (e, a), h in SCALAR_CASES])
def test_integers_beyond_their_range_name_the_argument(key, huge):
    (_, name), call = key, SCALARS[key]
    with pytest.raises(PacktoolError) as e:
        call(HUGE[huge])
    msg = str(e.value)
    assert "\n" not in msg and name in msg and len(msg) < 400, msg
    assert any(r in msg for r in ("2^31-1", "2^63-1", "2,147,483,647", "from 0 to")), msg  # its range


def test_attn_coef_too_large_for_a_float():
    with pytest.raises(PacktoolError, match="attn_coef must be a finite number"):
        pack_step([5, 6], capacity=64, attn_coef=10**400)


def test_least_common_multiple_of_dp_and_bin_count_multiple_beyond_int64():
    with pytest.raises(PacktoolError, match="bin_count_multiple=.* with dp=.*above 2\\^63-1"):
        pack_step([5, 6], capacity=64, bin_count_multiple=2**62 + 1, dp=2**30)


def _bool_items():
    """every bool a caller's list can hold among its ints: numpy's list conversion makes the
    list int64 (True -> 1) before a dtype test sees it (S39-4)."""
    items = {"python True": True, "python False": False, "numpy True": np.True_, "0-d numpy bool": np.array(True)}
    try:
        import torch
        items["0-d torch bool"] = torch.tensor(True)
    except ImportError:
        pass
    return items


BOOL_ITEMS = _bool_items()
BOOL_CASES = [(e, b) for e in ARRAYS for b in BOOL_ITEMS]


@pytest.mark.parametrize("entry,item", BOOL_CASES, ids=[f"{e}-{b}" for e, b in BOOL_CASES])
def test_a_bool_inside_a_list_of_ints_is_refused_naming_its_index(entry, item):
    call, name, good = ARRAYS[entry]
    value = BOOL_ITEMS[item]
    bad = good[:-1] + [value]
    if entry == "micro_batches row_offsets":  # offsets start at 0: the bool goes first
        bad = [value, good[-1]]
    with pytest.raises(PacktoolError) as e:
        call(bad)
    msg = str(e.value)
    at = 0 if entry == "micro_batches row_offsets" else len(good) - 1
    assert "\n" not in msg and "bool" in msg and name in msg and f"{at}" in msg, msg


def test_s39_4_rollout_lengths_with_a_flag_are_not_a_one_token_sequence():
    torch = pytest.importorskip("torch")
    al = Alignment(capacity=1024)
    for v in (True, np.True_, torch.tensor(True)):
        with pytest.raises(PacktoolError, match=r"^lengths\[1\] is a bool \(True\)"):
            pack_step([100, v], al)
    with pytest.raises(PacktoolError, match=r"^seg_lens\[1\] is a bool \(True\)"):
        micro_batches([100, True], al, budget=2048)
    # 1-valued ints of every kind a caller holds still pass
    assert pack_step([100, 1, np.int64(1), torch.tensor(1)], al).rank_bins(0)[0].tolist() == [0, 1, 2, 3]
