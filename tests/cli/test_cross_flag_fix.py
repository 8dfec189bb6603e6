"""Stranger trial S29-11: with --fixed-length below -C a row too long for the slab said "raise
--max-tokens", which changes nothing (every slab is --fixed-length long). Every message whose fix
gives the slab more room (or less) names the flag that sets the usable capacity: --fixed-length
when given, -C/--max-tokens otherwise; a fixed length rounded up past -C names -C too."""
from __future__ import annotations

import numpy as np
import pytest

from packtool.align import Alignment
from packtool.cli.flags import FLAG_OF
from packtool.errors import PacktoolError, spelled_as
from packtool.planning import bounds
from packtool.planning.core import FirstTooLong, PackingConfig, SequenceError, apply_overflow, plan


def _plan_error(a):  # `plan`/`inspect --lengths`: the first too-long row under --overflow error
    plan(np.array([10, 5000]), a, PackingConfig(overflow="error"))


def _early(a):  # pack's refusal while tokenizing (local and Ray engines)
    FirstTooLong(a)(np.array([5000]), np.zeros(1, bool), "d.jsonl", 0)


def _memory(a, mp):  # the capacity-sized tables over the machine's memory
    mp.setattr(bounds, "available_bytes", lambda: 10**4)
    bounds.check_capacity(a, sharded=True, writers=8)


def _split(a, mp):  # --overflow split into too many chunks
    mp.setattr(bounds, "available_bytes", lambda: 10**3)
    apply_overflow(np.array([10**6]), a, "split")


SITES = {"plan": lambda a, mp: _plan_error(a), "early": lambda a, mp: _early(a), "memory": _memory,
         "split": _split}
# slab settings -> (the flag a fix must name, a flag it must not name as the fix)
SLABS = {"fixed": (dict(capacity=8192, fixed_length=1024), "--fixed-length"),
         "capacity": (dict(capacity=1024), "--max-tokens")}


def _message(call) -> str:
    with spelled_as(FLAG_OF), pytest.raises((PacktoolError, SequenceError)) as e:
        call()
    return str(e.value.detail if isinstance(e.value, SequenceError) else e.value)


@pytest.mark.parametrize("slab", sorted(SLABS))
@pytest.mark.parametrize("site", sorted(SITES))
def test_a_fix_names_the_flag_that_sets_the_slab(site, slab, monkeypatch):
    kw, flag = SLABS[slab]
    msg = _message(lambda: SITES[site](Alignment(**kw), monkeypatch))
    fix = msg.rsplit(":", 1)[-1] if site != "memory" else msg.split(";", 1)[-1]
    assert flag in fix, msg
    if slab == "fixed":  # -C may be named only as the one that must stay at least as large
        assert "raise --max-tokens" not in msg and "larger --max-tokens" not in msg, msg
        assert "smaller --max-tokens" not in msg, msg
    else:
        assert "--fixed-length" not in msg, msg


@pytest.mark.parametrize("capacity,fixes", [(8192, ["--fixed-length 112"]),
                                            (100, ["--fixed-length 112 with --max-tokens 112", "--fixed-length 96"])])
def test_a_fixed_length_off_the_multiple_names_a_length_minus_c_takes(capacity, fixes):
    msg = _message(lambda: Alignment(cp=8, capacity=capacity, fixed_length=100))
    assert all(f in msg for f in fixes), msg
