"""`StepBins.rank_bins(r)` (stranger F12/F22): packed without dp there is one rank, 0, holding
every bin ("rank_bins needs dp" refused the obvious call); a rank outside the ranks is refused
naming the range, with or without dp. Built without packing, so no packer compiles here."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from packtool.online.step import OnlinePackError, StepBins


def _bins(dp):
    items = np.array([2, 0, 1, 3], np.int64)
    offsets = np.array([0, 2, 3, 4], np.int64)  # bins [2, 0], [1], [3]
    bin_of = np.array([0, 1, 0, 2], np.int64)
    lens = np.array([5, 4, 3, 2], np.int64)
    return StepBins(lens, lens, bin_of, offsets, items, SimpleNamespace(dp=dp))


def test_without_dp_rank_0_holds_every_bin_in_order():
    got = _bins(None).rank_bins(0)
    assert [b.tolist() for b in got] == [[2, 0], [1], [3]]
    idx, offs = _bins(None).rank_rows(0)
    assert idx.tolist() == [2, 0, 1, 3] and offs.tolist() == [0, 2, 3, 4]


@pytest.mark.parametrize("dp,r", [(None, 1), (None, -1), (None, True), (None, 0.0), (2, 2), (2, -1), (2, "0")])
def test_a_rank_outside_the_ranks_is_refused_naming_them(dp, r):
    with pytest.raises(OnlinePackError) as e:
        _bins(dp).rank_bins(r)
    msg = str(e.value)
    assert f"rank {r!r} is not a rank of" in msg and ("from 0 to 1" if dp else "pass 0") in msg, msg
    if dp is None:  # says what to do, not "a rank of one rank (...): from 0 to 0" (S28-12)
        assert "packed without dp" in msg and "pack with dp=N" in msg and "of one rank" not in msg, msg
