"""A 1-step Megatron run's checkpoint, for the tests that edit or copy one. A module, not a
tests/megatron/conftest.py: test modules import `conftest` by name (tests/conftest.py's data
paths), and a second conftest.py shadows that name for every module collected after it."""
from __future__ import annotations

import pytest
from megatron_slabs import greedy_bins, random_sequences, write_slab_dir

from packtool.align import Alignment
from packtool.megatron.loop import TrainConfig, train


@pytest.fixture(scope="module")
def one_step_run(tmp_path_factory, request):
    """(slab folder, the checkpoint file of a 1-step run) of the requesting module's SHAPE: each
    module edits or copies a checkpoint of the shape its cases are written for."""
    root = tmp_path_factory.mktemp("one_step")
    align = Alignment(capacity=64)
    seqs = random_sequences(12, 3, 30, seed=8)
    data = str(write_slab_dir(str(root / "d"), seqs, greedy_bins(seqs, align), align))
    train(TrainConfig(data_dir=data, shape=request.module.SHAPE, steps=1, quiet=True, save=str(root / "ck")))
    return data, root / "ck" / "mp_rank_00.pt"
