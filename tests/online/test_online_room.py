"""Every online argument that sizes an allocation beyond the data is bounded before it is
allocated (S41-13, issue 23 class 3): `micro_batches`' pad_to and an Alignment's fixed_length
through `pack_tensors`, `thd_batch` and `thd_batches` are refused in one OnlinePackError
naming the argument and the estimate when they cannot fit, not a numpy/torch allocator
traceback (or a node in swap); the same calls at a size that fits still work."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from packtool.align import Alignment  # noqa: E402
from packtool.online import micro_batches, pack_tensors, thd_batch, thd_batches  # noqa: E402
from packtool.online import room  # noqa: E402
from packtool.online.step import OnlinePackError  # noqa: E402

HUGE = 2 ** 31 - 1
HAVE = 1 << 30  # the room a test stands in for: 1 GiB


@pytest.fixture(autouse=True)
def one_gib(monkeypatch):
    monkeypatch.setattr(room, "room_bytes", lambda: HAVE)


def _seqs():
    return [torch.arange(1, 11), torch.arange(1, 6)]


def _fixed(n):
    return Alignment(capacity=n, fixed_length=n)


CALLS = {
    "micro_batches pad_to": (lambda n: micro_batches([5, 7, 900], Alignment(capacity=1024), 1024, pad_to=n),
                             "pad_to="),
    "pack_tensors fixed_length": (lambda n: pack_tensors(_seqs(), _fixed(n)), "fixed_length="),
    "pack_tensors fixed_length, side column": (
        lambda n: pack_tensors(_seqs(), _fixed(n), side={"lp": [torch.ones(10), torch.ones(5)]}), "fixed_length="),
    "thd_batch fixed_length": (lambda n: thd_batch(_seqs(), _fixed(n)), "fixed_length="),
    "thd_batches fixed_length": (lambda n: thd_batches(_seqs(), _fixed(n), [[0], [1]]), "fixed_length="),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_refused_before_allocating(name):
    call, flag = CALLS[name]
    with pytest.raises(OnlinePackError) as e:
        call(HUGE - HUGE % 128)
    msg = str(e.value)
    assert "\n" not in msg and flag in msg and "GiB" in msg and "1.0 GiB" in msg, msg


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_size_that_fits_works(name):
    CALLS[name][0](4096)


def test_finding_example_pad_to_counts_the_empty_micro_batches():
    with pytest.raises(OnlinePackError, match=r"pad_to=2,147,483,647 would add 2,147,483,646 empty micro-batches "
                                              r"for 3 rows.*largest micro-batch count over the DP ranks"):
        micro_batches([5, 7, 900], Alignment(capacity=1024), budget=1024, pad_to=HUGE)
    mb = micro_batches([5, 7, 900], Alignment(capacity=1024), budget=1024, pad_to=1000)
    assert mb.num_micro_batches == 1000 and mb.num_empty == 999
