"""S39-9 (issue 23 class 6: packtool.online checks its arguments as the CLI checks its flags):
`side=` keys were not checked at all: `''`, `3`, `None`, `'a b'`, `('t',)` came back as
`PackedTensors.side` / `ThdBatch.side` keys, where `pack --side-columns` refuses each (a later
save of the same rollouts through `pack` then failed on the name). Every online entry that
takes `side=` holds its keys to packtool.side's one name rule, in one line naming `side[...]`."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="online batches are torch tensors")

from packtool.align import Alignment  # noqa: E402
from packtool.online import OnlinePackError  # noqa: E402
from packtool.online.packed import pack_tensors  # noqa: E402
from packtool.side import RESERVED, name_problem  # noqa: E402

AL = Alignment(cp=2, capacity=1024)
IDS = [torch.arange(1, 11), torch.arange(1, 7)]
MASK = [torch.ones(10, dtype=torch.long), torch.ones(6, dtype=torch.long)]


def _thd(kind):
    pytest.importorskip("megatron.core", reason="ThdBatch carries megatron's PackedSeqParams")
    from packtool.online.thd import thd_batch, thd_batches
    if kind == "thd_batch":
        return lambda **kw: thd_batch(IDS, AL, MASK, cp_size=2, cp_rank=0, **kw)
    return lambda **kw: thd_batches(IDS, AL, [[0, 1]], loss_mask=MASK, cp_size=2, cp_rank=0, **kw)[0]


ENTRIES = {
    "pack_tensors": lambda: (lambda **kw: pack_tensors(IDS, AL, MASK, cp_rank=0, **kw)),
    "thd_batch": lambda: _thd("thd_batch"),
    "thd_batches": lambda: _thd("thd_batches"),
}
BAD = {"empty": "", "int": 3, "None": None, "space": "a b", "tuple": ("t",), "leading digit": "1x",
       "too long": "x" * 129, "reserved": "labels", "format column": "seq_lens", "dash": "old-logprobs"}
CASES = [(e, b) for e in ENTRIES for b in BAD]


def _side(name):
    return {name: [torch.randn(10), torch.randn(6)]}


@pytest.mark.parametrize("entry,bad", CASES, ids=[f"{e}-{b}" for e, b in CASES])
def test_a_side_key_the_cli_refuses_is_refused_in_one_line(entry, bad):
    call = ENTRIES[entry]()
    call(side=_side("ok_name"))  # the entry takes a usable name
    name = BAD[bad]
    with pytest.raises(OnlinePackError) as e:
        call(side=_side(name), side_fill={name: 0.0})
    msg = str(e.value)
    from packtool.integers import short  # a 129-character name is said cut to a line's worth
    assert "\n" not in msg and msg.startswith(f"side[{short(name)}]") and "side column name" in msg, msg


def test_the_rule_is_packtools_one_name_rule():
    """the keys refused here are exactly those pack --side-columns refuses."""
    from packtool.errors import PacktoolError
    from packtool.side import parse_names
    for name in [*[v for v in BAD.values() if isinstance(v, str) and v.strip()], *sorted(RESERVED)[:3]]:
        assert name_problem(name)
        with pytest.raises(PacktoolError):
            parse_names(name)


def test_s39_9_the_findings_names():
    for name in ["", 3, None, "a b", ("t",)]:
        with pytest.raises(OnlinePackError, match=r"^side\[.*\] is not a usable side column name"):
            pack_tensors(IDS, AL, MASK, cp_rank=0, side=_side(name), side_fill={name: 0.0})


# S50B-7: the pair rule too. `shift_lp` beside `lp` is the key every batch gives `lp` shifted like labels
# (SlabCollator's batch; the dict a trainer makes of a ThdBatch's side and side_targets), which pack
# --side-columns refused and every online entry took. Both orders of the pair, each entry.
PAIRS = {"lp first": ("lp", "shift_lp"), "shift first": ("shift_lp", "lp"),
         "RL's names": ("old_logprobs", "shift_old_logprobs")}
PAIR_CASES = [(e, p) for e in ENTRIES for p in PAIRS]


@pytest.mark.parametrize("entry,pair", PAIR_CASES, ids=[f"{e}-{p}" for e, p in PAIR_CASES])
def test_a_shift_pair_is_refused_naming_the_shift_key(entry, pair):
    call = ENTRIES[entry]()
    a, b = PAIRS[pair]
    shifted = b if b.startswith("shift_") else a
    call(side={"shift_x": [torch.randn(10), torch.randn(6)]})  # shift_ alone names no other column: taken
    with pytest.raises(OnlinePackError) as e:
        call(side={**_side(a), **_side(b)})
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"side[{shifted!r}] is not a usable side column name"), msg
    assert "shifted like labels" in msg, msg


@pytest.mark.parametrize("pair", PAIRS)
def test_the_pair_rule_is_packs(pair):
    """pack --side-columns refuses the same pair with the same words (side.shift_clash, one rule)."""
    from packtool.errors import PacktoolInputError
    from packtool.side import parse_side_spec, shift_clash
    a, b = PAIRS[pair]
    why = shift_clash([a, b])[1]
    with pytest.raises(PacktoolInputError, match="shifted like labels") as e:
        parse_side_spec([a, b])
    assert str(e.value).endswith(why)
    with pytest.raises(OnlinePackError) as e:
        pack_tensors(IDS, AL, MASK, cp_rank=0, side={**_side(a), **_side(b)})
    assert why in str(e.value)
