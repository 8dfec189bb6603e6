"""`planning.core.OVERFLOW_FIGURES` is the one statement of which `OverflowStats` figures each
overflow policy can make non-zero (verify holds a manifest's stats.overflow to it): held here
to what `apply_overflow` produces on lengths that overflow."""
from __future__ import annotations

from dataclasses import asdict, fields

import numpy as np
import pytest

from packtool.align import Alignment
from packtool.planning.core import (
    MASK_FIGURES,
    OVERFLOW_FIGURES,
    OVERFLOW_POLICIES,
    OverflowStats,
    SequenceError,
    apply_overflow,
    overflow_of_segments,
)

FIGURES = tuple(f.name for f in fields(OverflowStats) if f.name != "policy")
ALIGNMENTS = {"plain": Alignment(capacity=64), "cp2-fp8": Alignment(cp=2, fp8="tensorwise", capacity=96),
              "fixed": Alignment(capacity=128, fixed_length=64)}
# short rows beside rows just over, and far over, the usable capacity (up to 3 chunks)
LENGTHS = np.array([5, 65, 17, 200, 64, 129, 1])


def test_every_policy_has_its_figures_and_only_overflow_figures():
    assert set(OVERFLOW_FIGURES) == set(OVERFLOW_POLICIES)
    assert all(set(v) <= set(FIGURES) for v in OVERFLOW_FIGURES.values()), OVERFLOW_FIGURES


@pytest.mark.parametrize("align", list(ALIGNMENTS))
@pytest.mark.parametrize("policy", OVERFLOW_POLICIES)
def test_figures_are_what_apply_overflow_makes(policy, align):
    a = ALIGNMENTS[align]
    assert (a.seq_footprint(LENGTHS) > a.usable).sum() >= 2  # the lengths do overflow
    try:
        _, stats = apply_overflow(LENGTHS, a, policy)
    except SequenceError:  # error, and singleton under a fixed length: refused, nothing counted
        assert policy == "error" or (policy == "singleton" and a.fixed_length is not None)
        _, stats = apply_overflow(LENGTHS[a.seq_footprint(LENGTHS) <= a.usable], a, policy)
        assert not any(asdict(stats)[k] for k in FIGURES), stats
        if policy == "error":
            assert OVERFLOW_FIGURES[policy] == ()
        return
    made = {k for k in FIGURES if asdict(stats)[k]}
    # the loss masks' figures are pack's to count (planning.cut_targets): never the lengths'
    assert made == set(OVERFLOW_FIGURES[policy]) - set(MASK_FIGURES.get(policy, ())), (policy, stats)
    assert set(MASK_FIGURES.get(policy, ())) <= set(OVERFLOW_FIGURES[policy])


@pytest.mark.parametrize("align", list(ALIGNMENTS))
@pytest.mark.parametrize("policy", OVERFLOW_POLICIES)
def test_the_recount_from_segments_is_what_apply_overflow_recorded(policy, align):
    """`inspect` recounts a plan file's (or an older output's) overflow figures from its
    segments through planning's `overflow_of_segments`: the figures apply_overflow recorded,
    except truncate's, which the segments do not hold (a cut row looks like a row of U)."""
    a = ALIGNMENTS[align]
    lengths = LENGTHS if policy != "error" and (policy, a.fixed_length) != ("singleton", 64) \
        else LENGTHS[a.seq_footprint(LENGTHS) <= a.usable]
    segs, stats = apply_overflow(lengths, a, policy)
    got = overflow_of_segments(segs.source, segs.chunk, policy, int(segs.singleton.sum()))
    assert got == (stats if policy != "truncate" else None), (policy, got, stats)
