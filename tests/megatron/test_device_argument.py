"""Every public call taking `device` (packtool.megatron's and packtool.online's; packtool.hf
takes none) checks it at the call (params.torch_device): a misspelled device or one this
machine lacks is one line naming `device` (PacktoolConfigError; packtool.online's own
OnlinePackError), not torch's RuntimeError / AssertionError at the first tensor, steps later
(or mid-build, after a process group was made)."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("megatron.core")
import torch  # noqa: E402
from megatron_slabs import greedy_bins, random_sequences, write_slab_dir  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.errors import PacktoolConfigError  # noqa: E402
from packtool.megatron import GPTShape, PackedSlabDataset, Step, build_gpt, build_thd_params, make_thd_batch  # noqa: E402
from packtool.megatron.model import transformer_config  # noqa: E402
from packtool.megatron.parallel import init_parallel  # noqa: E402
from packtool.online import pack_tensors, thd_batch, thd_batches  # noqa: E402
from packtool.online.step import OnlinePackError  # noqa: E402


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    align = Alignment(capacity=48)
    seqs = random_sequences(8, 3, 30, seed=4)
    return str(write_slab_dir(str(tmp_path_factory.mktemp("d") / "s"), seqs, greedy_bins(seqs, align), align))


SEG = (np.array([5, 3]), np.array([8, 8]))
SHAPE = GPTShape(layers=1, hidden=16, heads=2, ffn=32, vocab=64, max_seq=64)
IDS = [torch.arange(1, 6), torch.arange(1, 4)]


def _build_gpt(d):
    init_parallel(1, 1, "cpu")
    return build_gpt(SHAPE, device=d)


CALLS = {  # name: (the call, the error it raises)
    "PackedSlabDataset": (lambda path, d: PackedSlabDataset(path, device=d), PacktoolConfigError),
    "Step.global_loss_tokens": (lambda path, d: Step(0, 0, [], 0, 0, 0).global_loss_tokens(device=d),
                                PacktoolConfigError),
    "make_thd_batch": (lambda path, d: make_thd_batch(np.arange(16), np.ones(16, np.uint8), *SEG, device=d),
                       PacktoolConfigError),
    "build_thd_params": (lambda path, d: build_thd_params(*SEG, 1, 0, device=d), PacktoolConfigError),
    "build_gpt": (lambda path, d: _build_gpt(d), PacktoolConfigError),
    "transformer_config": (lambda path, d: transformer_config(SHAPE, torch.float32, d), PacktoolConfigError),
    "init_parallel": (lambda path, d: init_parallel(1, 1, d), PacktoolConfigError),
    "online.pack_tensors": (lambda path, d: pack_tensors(IDS, Alignment(capacity=16), device=d), OnlinePackError),
    "online.thd_batch": (lambda path, d: thd_batch(IDS, Alignment(capacity=16), device=d), OnlinePackError),
    "online.thd_batches": (lambda path, d: thd_batches(IDS, Alignment(capacity=16), [[0, 1]], device=d),
                           OnlinePackError),
}
# misspelled, of a wrong kind, and well spelled but absent here (one GPU past those torch sees,
# as a string, a torch.device and a GPU number; plain 'cuda' where torch sees none)
BAD = ["bogus", "cuda:x", "", 2.0, True, f"cuda:{torch.cuda.device_count()}",
       torch.device("cuda", torch.cuda.device_count()), torch.cuda.device_count(),
       *(["cuda"] if not torch.cuda.is_available() else [])]


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_a_device_torch_cannot_use_is_refused_at_the_call(path, call, bad):
    fn, error = CALLS[call]
    with pytest.raises(error, match=r"^device\b") as e:
        fn(path, bad)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("good", ["cpu", torch.device("cpu"), "cpu:0"], ids=repr)
def test_a_device_torch_can_use_is_taken(path, call, good):
    CALLS[call][0](path, good)
