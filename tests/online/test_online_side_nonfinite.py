"""S40-4 (issue 23 class 5: nothing silent): NaN / +-inf side values given to the online path
(`pack_tensors`, `thd_batch`, `thd_batches`) are kept as given, as pack keeps them, and counted
where the user looks: `.side_nonfinite` on the result (per float column the NaN and +-inf counts
and the first one's sequence, token and value, as pack's --json `side_nonfinite`) and one
RuntimeWarning naming the column. They passed without a count or a word. S40-7: a side column
(or ids, or mask) on the meta device was torch's raw "Cannot copy out of meta tensor"."""
from __future__ import annotations

import math
import warnings

import pytest

torch = pytest.importorskip("torch", reason="online batches are torch tensors")

from packtool.align import Alignment  # noqa: E402
from packtool.online import OnlinePackError, pack_tensors  # noqa: E402

AL = Alignment(cp=2, capacity=64)
IDS = [torch.arange(1, 9), torch.arange(1, 6)]
MASK = [torch.tensor([0, 1, 1, 1, 1, 1, 1, 1]), torch.tensor([0, 1, 1, 1, 1])]
NAN, INF = float("nan"), float("inf")


def _thd_batch(ids, mask, **kw):
    pytest.importorskip("megatron.core", reason="ThdBatch carries megatron's PackedSeqParams")
    from packtool.online import thd_batch
    return thd_batch(ids, AL, mask, **kw)


def _thd_batches(ids, mask, **kw):
    pytest.importorskip("megatron.core", reason="ThdBatch carries megatron's PackedSeqParams")
    from packtool.online.thd import thd_batches
    return thd_batches(ids, AL, [list(range(len(ids)))], mask, **kw)[0]


ENTRIES = {"pack_tensors": lambda ids, mask, **kw: pack_tensors(ids, AL, mask, **kw),
           "thd_batch": _thd_batch, "thd_batches": _thd_batches}


def _col(values, dtype=torch.float32, k=None):
    """Sequence 1 of `lp` holds `values` from token 2 on (sequence 0 is clean)."""
    seq0, seq1 = torch.zeros(8, dtype=dtype), torch.zeros(5, dtype=dtype)
    for j, v in enumerate(values):
        seq1[2 + j] = v
    return [seq0, seq1] if k is None else [s[:, None].repeat(1, k) for s in (seq0, seq1)]


CASES = {  # name -> (side column, NaN count, inf count, first value)
    "nan": (_col([NAN]), 1, 0, NAN),
    "+inf": (_col([INF, INF]), 0, 2, INF),
    "-inf-and-nan": (_col([-INF, NAN, NAN]), 2, 1, -INF),
    "float64": (_col([NAN], torch.float64), 1, 0, NAN),
    "float16": (_col([INF], torch.float16), 0, 1, INF),
    "bfloat16": (_col([NAN], torch.bfloat16), 1, 0, NAN),
    "k-wide": (_col([NAN], k=3), 3, 0, [NAN] * 3),  # every value of the row counted, as pack counts
}


def _same(a, b):
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return (math.isnan(a) and math.isnan(b)) or a == b


@pytest.mark.parametrize("entry", list(ENTRIES))
@pytest.mark.parametrize("case", list(CASES))
def test_nonfinite_side_values_are_counted_and_said(entry, case):
    col, nan, inf, first = CASES[case]
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r = ENTRIES[entry](IDS, MASK, side={"lp": col, "ids": [t.to(torch.int32) for t in IDS]})
    got = r.side_nonfinite
    assert set(got) == {"lp"} and (got["lp"]["nan"], got["lp"]["inf"]) == (nan, inf), got
    assert got["lp"]["first"]["sequence"] == 1 and got["lp"]["first"]["token"] == 2, got
    assert _same(got["lp"]["first"]["value"], first), got
    said = [str(x.message) for x in w if issubclass(x.category, RuntimeWarning) and "'lp'" in str(x.message)]
    assert len(said) == 1 and f"{nan:,} NaN and {inf:,} +-inf" in said[0] and "sequence 1 token 2" in said[0], said
    # counted over the full micro-batch (every CP rank's slice), whichever rank asks
    other = ENTRIES[entry](IDS, MASK, side={"lp": col}, cp_rank=1)
    assert {k: v for k, v in other.side_nonfinite["lp"].items() if k != "first"} == {"nan": nan, "inf": inf}


@pytest.mark.parametrize("entry", list(ENTRIES))
def test_finite_side_values_say_nothing(entry):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        r = ENTRIES[entry](IDS, MASK, side={"lp": _col([-1e30, 3.0]), "ids": [t.to(torch.int32) for t in IDS]})
    assert r.side_nonfinite == {}


def test_the_finding_example():
    """S40-4 as filed: a NaN and a -inf column, one float side column, flat ids."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r = pack_tensors(IDS, AL, MASK, side={"lp": [torch.tensor([NAN] * 8), torch.tensor([-INF] * 5)]})
    assert (r.side_nonfinite["lp"]["nan"], r.side_nonfinite["lp"]["inf"]) == (8, 5)
    assert any("'lp'" in str(x.message) for x in w)


def test_flat_side_tensor_with_lengths_is_counted():
    flat = torch.cat(_col([NAN, INF]))
    r = pack_tensors(torch.cat(IDS), AL, torch.cat(MASK), side={"lp": flat}, lengths=[8, 5])
    assert (r.side_nonfinite["lp"]["nan"], r.side_nonfinite["lp"]["inf"]) == (1, 1)
    assert r.side_nonfinite["lp"]["first"] == {"sequence": 1, "token": 2, "value": NAN} or \
        math.isnan(r.side_nonfinite["lp"]["first"]["value"])


META = {"side": lambda: (IDS, MASK, {"lp": [torch.zeros(8, device="meta"), torch.zeros(5, device="meta")]}),
        "input_ids": lambda: ([t.to("meta") for t in IDS], None, {}),
        "loss_mask": lambda: (IDS, [t.to("meta") for t in MASK], {})}


@pytest.mark.parametrize("entry", list(ENTRIES))
@pytest.mark.parametrize("arg", list(META))
def test_meta_tensors_are_one_line_naming_the_argument(entry, arg):
    ids, mask, side = META[arg]()
    with pytest.raises(OnlinePackError) as e:
        ENTRIES[entry](ids, mask, side=side)
    msg = str(e.value)
    assert "\n" not in msg and "meta device" in msg, msg
    assert ("side column 'lp'" if arg == "side" else arg) in msg, msg
