"""Every megatron-side call taking `device` checks it at the call (params.torch_device): a
misspelled device or one this machine lacks is one PacktoolConfigError naming `device`, not
torch's RuntimeError / AssertionError at the first tensor, steps later."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("megatron.core")
import torch  # noqa: E402
from megatron_slabs import greedy_bins, random_sequences, write_slab_dir  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.errors import PacktoolConfigError  # noqa: E402
from packtool.megatron import PackedSlabDataset, Step, build_thd_params, make_thd_batch  # noqa: E402


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    align = Alignment(capacity=48)
    seqs = random_sequences(8, 3, 30, seed=4)
    return str(write_slab_dir(str(tmp_path_factory.mktemp("d") / "s"), seqs, greedy_bins(seqs, align), align))


SEG = (np.array([5, 3]), np.array([8, 8]))
CALLS = {
    "PackedSlabDataset": lambda path, d: PackedSlabDataset(path, device=d),
    "Step.global_loss_tokens": lambda path, d: Step(0, 0, [], 0, 0, 0).global_loss_tokens(device=d),
    "make_thd_batch": lambda path, d: make_thd_batch(np.arange(16), np.ones(16, np.uint8), *SEG, device=d),
    "build_thd_params": lambda path, d: build_thd_params(*SEG, 1, 0, device=d),
}
# misspelled, of a wrong kind, and well spelled but absent here (one GPU past those torch sees)
BAD = ["bogus", "cuda:x", "", 2.0, True, f"cuda:{torch.cuda.device_count()}",
       torch.device("cuda", torch.cuda.device_count())]


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_a_device_torch_cannot_use_is_refused_at_the_call(path, call, bad):
    with pytest.raises(PacktoolConfigError, match=r"^device\b") as e:
        CALLS[call](path, bad)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("good", ["cpu", torch.device("cpu"), "cpu:0"], ids=repr)
def test_a_device_torch_can_use_is_taken(path, call, good):
    CALLS[call](path, good)
