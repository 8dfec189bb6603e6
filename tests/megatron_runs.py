"""What the train tests share: a tiny model's flags, a small slab folder, the CLI run in-process, and a
1-step Megatron run's checkpoint for the tests that edit or copy one. A module, not a
tests/megatron/conftest.py: test modules import `conftest` by name (tests/conftest.py's data
paths), and a second conftest.py shadows that name for every module collected after it."""
from __future__ import annotations

import pytest
from megatron_slabs import greedy_bins, random_sequences, write_slab_dir

from packtool.align import Alignment
from packtool.megatron.loop import TrainConfig, train


TINY = ["--device", "cpu", "--layers", "1", "--hidden", "32", "--heads", "2"]  # `train` flags of a tiny model


def small_slabs(path, fp8: str = "none") -> str:
    """A slab folder of 12 random sequences at C=64 (megatron_slabs' writer); `fp8`: the
    alignment's (tensorwise: every sequence padded for an FP8 run)."""
    align = Alignment(fp8=fp8, capacity=64)
    seqs = random_sequences(12, 3, 30, seed=8)
    return str(write_slab_dir(str(path), seqs, greedy_bins(seqs, align), align))


@pytest.fixture(scope="module")
def slabs(tmp_path_factory):
    return small_slabs(tmp_path_factory.mktemp("c") / "d")


def run_cli(args):
    """`packtool ARGS` in this process (typer's runner: stdout and stderr apart)."""
    from typer.testing import CliRunner

    from packtool.cli.app import app
    return CliRunner().invoke(app, args)


@pytest.fixture(scope="module")
def one_step_run(tmp_path_factory, request):
    """(slab folder, the checkpoint file of a 1-step run) of the requesting module's SHAPE: each
    module edits or copies a checkpoint of the shape its cases are written for."""
    root = tmp_path_factory.mktemp("one_step")
    data = small_slabs(root / "d")
    train(TrainConfig(data_dir=data, shape=request.module.SHAPE, steps=1, quiet=True, save=str(root / "ck")))
    return data, root / "ck" / "mp_rank_00.pt"
