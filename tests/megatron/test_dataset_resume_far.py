"""PackedSlabDataset.steps(start_step=k) plans the one epoch holding step k, whatever k is: a
resume (library, or `train --load` of a checkpoint's step) never walks the epochs before it."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("megatron.core")

from megatron_slabs import greedy_bins, random_sequences, write_slab_dir  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.errors import PacktoolConfigError  # noqa: E402
from packtool.integers import INT64_MAX  # noqa: E402
from packtool.megatron.dataset import PackedSlabDataset  # noqa: E402


def _round_robin(tmp_path):
    align = Alignment(capacity=48)
    seqs = random_sequences(30, 3, 30, seed=3)
    return PackedSlabDataset(str(write_slab_dir(str(tmp_path / "r"), seqs, greedy_bins(seqs, align), align,
                                                rows_per_group=3, shards=2)), seed=5, grad_accum=2)


def _planned(tmp_path):  # the packer's DP plan (pack --dp 2): steps permuted per epoch
    align = Alignment(capacity=48)
    seqs = random_sequences(30, 3, 30, seed=2)
    bins = greedy_bins(seqs, align)
    nb = len(bins)
    path = write_slab_dir(str(tmp_path / "p"), seqs, bins, align, dp=2, dp_rank=np.arange(nb) % 2,
                          step=np.arange(nb) // 4, microbatch=np.arange(nb))
    return PackedSlabDataset(str(path), dp_rank=1, dp_size=2, seed=5)


KINDS = {"round-robin": _round_robin, "planned": _planned}
# (epochs, step within the epoch): near starts and the far ones a long run's checkpoint records
STARTS = [(0, 1), (1, 0), (3, 2), (10**12, 1), (INT64_MAX, 0)]


def _counting(ds, most=4):
    """ds.plan, refusing to be asked more than `most` times (a walk over earlier epochs)."""
    real, calls = ds.plan, []

    def plan(epoch, first_step=0):
        calls.append(epoch)
        assert len(calls) <= most, f"resume planned {len(calls)} epochs"
        return real(epoch, first_step)
    ds.plan = plan
    return calls


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("epochs,within", STARTS)
def test_resume_plans_only_the_epoch_of_its_step(tmp_path, kind, epochs, within):
    ds = KINDS[kind](tmp_path)
    per = ds.steps_per_epoch()
    start = min(epochs * per + within, INT64_MAX)
    want = ds.plan(start // per, first_step=start // per * per)[start % per]
    _counting(ds)
    got = list(ds.steps(start_step=start, max_steps=min(2, INT64_MAX - start + 1)))
    assert (got[0].step, got[0].epoch) == (start, start // per)
    assert [None if m is None else m.num_tokens for m in got[0].micro_batches] == \
        [ds.load(mb).num_tokens if mb else None for mb in want.micro_batches]
    if len(got) == 2:  # the next step follows, into the next epoch where the step was its last
        assert (got[1].step, got[1].epoch) == (start + 1, (start + 1) // per)


@pytest.mark.parametrize("kind", KINDS)
def test_step_numbers_end_at_int64(tmp_path, kind):
    ds = KINDS[kind](tmp_path)
    with pytest.raises(PacktoolConfigError, match=r"max_steps.*give at most max_steps=1"):
        next(ds.steps(start_step=INT64_MAX, max_steps=2))
    assert [s.step for s in ds.steps(start_step=INT64_MAX)] == [INT64_MAX]
