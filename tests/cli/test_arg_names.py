"""Library errors name the argument the caller passed, the command line its flag, one message
spelled by whoever called (errors.arg / spelled_as; the CLI's table is app.FLAG_OF). Stranger
trial, end of stop 27: `Alignment(tp=0)` said `--tp`, `make_seq_packer(.., 10**30)` said
`--max-tokens`. Every library check that names an argument is a case, run both ways."""
from __future__ import annotations

import numpy as np
import pytest

from packtool.align import Alignment, sp_note
from packtool.cli.flags import FLAG_OF
from packtool.errors import spelled_as
from packtool.planning import bounds
from packtool.planning.core import PackingConfig, plan


def _dp():
    from packtool.packers.dp import assign_dp
    assign_dp(np.array([0, 0, 1]), np.array([1, 1, 1]), np.array([1, 1, 1]), 8, 4)


def _dp0():
    from packtool.packers.dp import assign_dp
    assign_dp(np.array([0]), np.array([1]), np.array([1]), 8, 0)


def _memory(monkeypatch, **kw):
    monkeypatch.setattr(bounds, "available_bytes", lambda: 10**9)
    bounds.check_capacity(Alignment(capacity=100_000_000, **kw), sharded=True, writers=8)


def _split(monkeypatch):
    monkeypatch.setattr(bounds, "available_bytes", lambda: 10**6)
    bounds.check_split(10**8, Alignment(capacity=64), 10**9)


# case -> (the call, the arguments its message must name)
CASES = {
    "tp": (lambda mp: Alignment(tp=0), ["tp"]),
    "cp": (lambda mp: Alignment(cp=-1), ["cp"]),
    "fp8": (lambda mp: Alignment(fp8="fp4"), ["fp8"]),
    "convention": (lambda mp: Alignment(convention="megatron"), ["convention"]),
    "capacity": (lambda mp: Alignment(capacity=0), ["capacity"]),
    "capacity too large": (lambda mp: Alignment(capacity=10**30), ["capacity"]),
    "capacity below t": (lambda mp: Alignment(tp=4, fp8="blockwise", capacity=15), ["capacity"]),
    "fixed_length": (lambda mp: Alignment(fixed_length=0), ["fixed_length"]),
    "fixed_length multiple": (lambda mp: Alignment(tp=4, cp=2, capacity=64, fixed_length=100), ["fixed_length"]),
    "algorithm": (lambda mp: PackingConfig(algorithm="nfd"), ["algorithm"]),
    "overflow": (lambda mp: PackingConfig(overflow="drop"), ["overflow"]),
    "dp": (lambda mp: PackingConfig(dp=0), ["dp"]),
    "seed": (lambda mp: PackingConfig(seed=-1), ["seed"]),
    "too long": (lambda mp: plan(np.array([3, 17]), Alignment(capacity=16), PackingConfig("ffd")),
                 ["capacity", "overflow"]),
    "dp too few rows": (lambda mp: _dp(), ["dp"]),
    "dp zero": (lambda mp: _dp0(), ["dp"]),
    "memory": (lambda mp: _memory(mp), ["capacity", "workers", "plan_shard_rows"]),
    "memory fixed": (lambda mp: _memory(mp, fixed_length=100_000_000), ["fixed_length"]),
    "split memory": (lambda mp: _split(mp), ["capacity", "overflow"]),
}


def _message(monkeypatch, case) -> str:
    call, _ = CASES[case]
    with pytest.raises(ValueError) as e:
        call(monkeypatch)
    return str(e.value)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_library_caller_reads_its_argument(monkeypatch, case):
    msg = _message(monkeypatch, case)
    assert "--" not in msg and "-C" not in msg, msg
    for name in CASES[case][1]:
        assert name in msg, msg


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_command_line_reads_its_flag(monkeypatch, case):
    with spelled_as(FLAG_OF):
        msg = _message(monkeypatch, case)
    for name in CASES[case][1]:
        assert FLAG_OF[name] in msg and f"{name}=" not in msg, msg


def test_the_spelling_ends_with_its_block():
    with spelled_as(FLAG_OF):
        assert "--sp" in sp_note(1, True)
    assert sp_note(1, True).startswith("sp has no effect with tp=1")


def test_an_online_packer_names_its_own_argument():
    from packtool.online import make_seq_packer
    with pytest.raises(ValueError) as e:
        make_seq_packer("first_fit_decreasing", 10**30, 1, 1)
    assert "bin_capacity must be" in str(e.value) and "--" not in str(e.value), e.value
    with pytest.raises(ValueError, match="^capacity must"):  # the wrapper's words stay its own
        Alignment(capacity=0)


def test_a_check_made_for_another_process_keeps_its_callers_words():
    """`--overflow error`'s early refusal runs in Ray's tokenize tasks, where no spelling is set."""
    import pickle

    from packtool.planning.core import PlanError, first_too_long
    with spelled_as(FLAG_OF):
        check = pickle.dumps(first_too_long(Alignment(capacity=16), PackingConfig("bfd")))
    with pytest.raises(PlanError, match="raise --max-tokens or use --overflow split"):
        pickle.loads(check)(np.array([40]), np.zeros(1, bool), "x.jsonl", 0)
