"""Issue 23 class 5 (S36-3, S36-4): what `pack_tensors` / `thd_batch` put into the loss and on
the pads is what the caller gave, or one OnlinePackError naming the argument. A loss_mask
value other than 0/1 (a soft weight, HF's -1/-100 "ignore", NaN) was cast to a plain target;
a side_fill key naming no column was dropped, and a fill the column cannot hold (NaN, 0.5 in
an int column) was written on every pad."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="online batches are torch tensors")

from packtool.align import Alignment  # noqa: E402
from packtool.online import OnlinePackError, pack_tensors  # noqa: E402

AL = Alignment(capacity=64, fixed_length=32)  # a fill segment: pads the fill lands on
LENS = (9, 5)


def _thd_batch(*a, **kw):
    pytest.importorskip("megatron.core", reason="ThdBatch carries megatron's PackedSeqParams")
    from packtool.online import thd_batch
    return thd_batch(*a, **kw)


ENTRIES = {"pack_tensors": pack_tensors, "thd_batch": _thd_batch}


def _ids(form):
    seqs = [torch.arange(1, n + 1) for n in LENS]
    return (torch.cat(seqs), {"lengths": list(LENS)}) if form == "flat" else (seqs, {})


def _mask(form, dtype, value):
    seqs = [torch.ones(n, dtype=dtype) for n in LENS]
    seqs[1][3] = value
    return torch.cat(seqs) if form == "flat" else seqs


BAD_MASKS = [(torch.float32, 0.5), (torch.float32, 2.0), (torch.float32, -1.0), (torch.float32, float("nan")),
             (torch.float32, float("inf")), (torch.float16, 0.5), (torch.bfloat16, -1.0), (torch.float64, 1.5),
             (torch.int64, -100), (torch.int64, -1), (torch.int32, 2), (torch.uint8, 2), (torch.int8, -1)]


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("form", ["per_sequence", "flat"])
@pytest.mark.parametrize("dtype,value", BAD_MASKS, ids=[f"{d}-{v}".replace("torch.", "") for d, v in BAD_MASKS])
def test_a_loss_mask_value_other_than_0_or_1_is_refused_naming_sequence_and_position(entry, form, dtype, value):
    ids, kw = _ids(form)
    with pytest.raises(OnlinePackError) as e:
        ENTRIES[entry](ids, AL, _mask(form, dtype, value), **kw)
    msg = str(e.value)
    assert "\n" not in msg and ("loss_mask (sequence 1)" in msg or "loss_mask[1]" in msg)
    assert "position 3" in msg and "0 (not a target) or 1" in msg


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int64, torch.float32, torch.bfloat16])
def test_a_0_1_loss_mask_of_any_dtype_counts_its_targets(entry, dtype):
    seqs = [torch.ones(n, dtype=dtype) for n in LENS]
    seqs[1][3] = 0
    got = ENTRIES[entry](_ids("per_sequence")[0], AL, seqs)
    assert got.num_loss_tokens == sum(LENS) - len(LENS) - 1  # first tokens predict nothing


F32 = {"lp": [torch.zeros(n) for n in LENS]}
I32 = {"sup": [torch.zeros(n, 2, dtype=torch.int32) for n in LENS]}
F16 = {"h": [torch.zeros(n, dtype=torch.float16) for n in LENS]}
BAD_FILLS = {
    "typo'd key": (F32, {"logp": -1.0}, "'logp', not a side column"),
    "key with no side": ({}, {"lp": -1.0}, "'lp', not a side column"),
    "nan": (F32, {"lp": float("nan")}, "side_fill['lp'] must be a finite number"),
    "inf": (F32, {"lp": float("-inf")}, "side_fill['lp'] must be a finite number"),
    "str": (F32, {"lp": "1.0"}, "side_fill['lp'] must be a finite number"),
    "past float16": (F16, {"h": 1e6}, "side_fill['h'] must be a finite number"),
    "0.5 in int": (I32, {"sup": 0.5}, "side_fill['sup'] must be an integer"),
    "True in int": (I32, {"sup": True}, "side_fill['sup'] must be an integer"),
    "past int32": (I32, {"sup": 2 ** 40}, "side_fill['sup'] must be an integer"),
    "not a dict": (F32, [("lp", -1.0)], "side_fill must be a dict"),
}


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("case", BAD_FILLS)
def test_a_side_fill_that_names_no_column_or_does_not_fit_it_is_refused(entry, case):
    side, fill, said = BAD_FILLS[case]
    with pytest.raises(OnlinePackError) as e:
        ENTRIES[entry](_ids("per_sequence")[0], AL, side=side, side_fill=fill)
    assert said in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("side,fill,want", [(F32, {"lp": -1}, -1.0), (I32, {"sup": -7}, -7), (F32, {}, 0.0),
                                            (I32, {}, -1), (F16, {"h": 65504.0}, 65504.0)])
def test_a_fill_the_column_holds_lands_on_every_pad(side, fill, want):
    got = pack_tensors(_ids("per_sequence")[0], AL, side=side, side_fill=fill)
    (name, v), = got.side.items()
    pads = got.input_ids.numel() - sum(LENS)
    assert pads > 0 and (v[-pads:] == want).all()
