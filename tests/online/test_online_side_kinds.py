"""Issue 23 class 5 (S37-1): a side column's pads hold a value its dtype holds, and a side
column torch cannot place is one OnlinePackError naming the column, never torch's own words.
The default fill -1 became True on every pad of a bool column and 255 in a uint8 one (and a
bool column could not be given False); complex was accepted, float8 ended in torch's "isinf not
implemented" after the layout work (S45B-4); sequences whose rank, K or
dtype differ reached torch.cat (a raw RuntimeError, or a silent promotion)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="online batches are torch tensors")

from packtool.align import Alignment  # noqa: E402
from packtool.online import OnlinePackError, pack_tensors  # noqa: E402

AL = Alignment(cp=2, capacity=64)
LENS = (5, 8)  # sequence 0 is padded to 8 (cp=2): three pads after it
IDS = [torch.arange(1, n + 1) for n in LENS]


def _thd_batch(*a, **kw):
    pytest.importorskip("megatron.core", reason="ThdBatch carries megatron's PackedSeqParams")
    from packtool.online import thd_batch
    return thd_batch(*a, **kw)


def _thd_batches(ids, al, *, side, side_fill=None, lengths=None, cp_size=1):
    pytest.importorskip("megatron.core", reason="ThdBatch carries megatron's PackedSeqParams")
    from packtool.online.thd import thd_batches
    if lengths is not None:  # thd_batches takes per-sequence lists only
        pytest.skip("thd_batches has no flat form")
    return thd_batches(ids, al, [list(range(len(ids)))], side=side, side_fill=side_fill or {}, cp_size=1)[0]


ENTRIES = {"pack_tensors": pack_tensors, "thd_batch": _thd_batch, "thd_batches": _thd_batches}


def _col(dtype, form, value=0):
    seqs = [torch.full((n,), value).to(dtype) for n in LENS]  # torch fills no float8 tensor
    return (torch.cat(seqs), {"lengths": list(LENS)}) if form == "flat" else (seqs, {})


def _call(entry, form, side, side_fill=None):
    ids = torch.cat(IDS) if form == "flat" else IDS
    kw = {"lengths": list(LENS)} if form == "flat" else {}
    return ENTRIES[entry](ids, AL, side=side, side_fill=side_fill or {}, cp_size=1, **kw)  # the whole slab


NEED_FILL = {torch.bool: "side_fill={'c': False}", torch.uint8: "side_fill={'c': 0}"}
FLOAT8 = [getattr(torch, n) for n in dir(torch) if n.startswith("float8_")]  # S45B-4: torch counts no NaN in them
REFUSED = [torch.complex64, torch.complex128, torch.uint16, torch.uint32, torch.uint64, *FLOAT8]


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("form", ["per_sequence", "flat"])
@pytest.mark.parametrize("dtype", [*NEED_FILL, *REFUSED], ids=lambda d: str(d).replace("torch.", ""))
def test_a_side_dtype_the_default_fill_does_not_fit_or_torch_cannot_place_is_refused(entry, form, dtype):
    with pytest.raises(OnlinePackError) as e:
        _call(entry, form, {"c": _col(dtype, form)[0]})
    msg = str(e.value)
    assert "\n" not in msg and f"side column 'c' is {dtype}" in msg and "cast it" in msg
    assert NEED_FILL.get(dtype, "side columns are float (float16, bfloat16, float32, float64), signed int") in msg


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("dtype,fill", [(torch.bool, False), (torch.bool, True), (torch.uint8, 0),
                                        (torch.uint8, 7)])
def test_a_bool_or_uint8_column_takes_a_fill_it_holds_and_keeps_its_dtype(entry, dtype, fill):
    other = 1 if fill == 0 else 0  # the values differ from the fill: a pad shows which it holds
    got = _call(entry, "per_sequence", {"c": _col(dtype, "per_sequence", other)[0]}, {"c": fill})
    for v in (got.side["c"], got.side_targets["c"]):
        v = v.reshape(-1)
        assert v.dtype == dtype and (v[LENS[0]:8] == fill).all() and (v[:LENS[0] - 1] == other).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8,
                                   torch.int16, torch.int32, torch.int64], ids=lambda d: str(d).replace("torch.", ""))
def test_every_placed_dtype_gets_the_default_fill_exactly(dtype):
    got = pack_tensors(IDS, AL, side={"c": _col(dtype, "per_sequence", 1)[0]}, cp_size=1)
    want = 0.0 if dtype.is_floating_point else -1
    for v in (got.side["c"], got.side_targets["c"]):
        assert v.dtype == dtype and (v[LENS[0]:8] == want).all() and (v[:LENS[0] - 1] == 1).all()


@pytest.mark.parametrize("value,fill", [(torch.bool, 2), (torch.bool, 0.5), (torch.uint8, -1), (torch.uint8, 256)])
def test_a_fill_a_bool_or_uint8_column_does_not_hold_is_refused(value, fill):
    with pytest.raises(OnlinePackError, match=r"side_fill\['c'\] must be"):
        pack_tensors(IDS, AL, side={"c": _col(value, "per_sequence")[0]}, side_fill={"c": fill})


SHAPES = {  # per-sequence side values torch.cat refused in its own words, or promoted silently
    "rank": ([torch.zeros(5, 2), torch.zeros(8)], "sequence 1 has shape (8,) but sequence 0 has (5, 2)"),
    "K": ([torch.zeros(5, 2), torch.zeros(8, 3)], "sequence 1 has shape (8, 3) but sequence 0 has (5, 2)"),
    "3-D": ([torch.zeros(5, 2, 2), torch.zeros(8, 2, 2)], "sequence 0 has shape (5, 2, 2): one scalar or one"),
    "dtype": ([torch.zeros(5), torch.zeros(8, dtype=torch.int64)],
              "sequence 1 is torch.int64 but sequence 0 is torch.float32"),
    "ragged list": ([[1, [2]], [0] * 8], "is not one tensor per sequence"),
    "a number": (5, "is not one tensor per sequence"),
}


@pytest.mark.parametrize("entry", ["pack_tensors", "thd_batch"])
@pytest.mark.parametrize("case", SHAPES)
def test_side_sequences_of_another_shape_or_dtype_are_refused_naming_column_and_sequence(entry, case):
    value, said = SHAPES[case]
    with pytest.raises(OnlinePackError) as e:
        _call(entry, "per_sequence", {"c": value})
    assert "\n" not in str(e.value) and str(e.value).startswith("side column 'c'") and said in str(e.value)


@pytest.mark.parametrize("value,said", [([torch.zeros(5)], "is 1 entries for 2 sequences"),
                                        (torch.zeros(13), "is 13 entries for 2 sequences"),
                                        (5, "is one int for 2 sequences"),
                                        (torch.tensor(1.0), "is one Tensor for 2 sequences")])
def test_thd_batches_refuses_a_side_column_that_is_not_one_entry_per_sequence(value, said):
    with pytest.raises(OnlinePackError, match=said):
        _thd_batches(IDS, AL, side={"c": value})
