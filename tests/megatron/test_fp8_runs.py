"""FP8 training runs on CPU (fp32 reference GEMMs): what differs between an FP8 run and a bf16
run besides the GEMMs' precision, and what carries over between runs in one process.

- the seed sets the init and the data order, and nothing else is carried from one run to
  the next in one process (bench/train_fp8.py runs every recipe in one process);
- with the quantizers made lossless, an FP8 run IS the plain run: the FP8 linears' wiring
  (autograd function, per-step weight cache, gradient dtypes) changes nothing but the GEMM
  operands' precision.
"""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("megatron.core")

from megatron_slabs import greedy_bins, random_sequences, write_slab_dir  # noqa: E402

from packtool.kernels import fp8 as k  # noqa: E402
from packtool.align import Alignment  # noqa: E402
from packtool.megatron.dataset import PackedSlabDataset  # noqa: E402
from packtool.megatron.loop import TrainConfig, train  # noqa: E402
from packtool.megatron.model import GPTShape  # noqa: E402

SHAPE = GPTShape(layers=1, hidden=512, heads=4, ffn=512, vocab=128, max_seq=256)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    align = Alignment(fp8="blockwise", capacity=64)
    seqs = random_sequences(24, 3, 40, seed=5)
    path = tmp_path_factory.mktemp("slabs") / "d"
    return str(write_slab_dir(str(path), seqs, greedy_bins(seqs, align), align))


def _losses(data, fp8="none", seed=0, steps=4):
    cfg = TrainConfig(data_dir=data, shape=SHAPE, steps=steps, lr=3e-3, warmup=1,
                      grad_accum=2, seed=seed, fp8=fp8, quiet=True, log_every=0)
    return [r.loss for r in train(cfg).records]


def test_runs_in_one_process_share_nothing(data):
    first = {r: _losses(data, r) for r in ("none", "blockwise", "tensorwise")}
    again = {r: _losses(data, r) for r in ("tensorwise", "blockwise", "none")}
    assert first == again  # bit for bit: RNG, data order, weight caches start afresh


def test_seed_sets_init_and_data_order(data):
    a = PackedSlabDataset(data, seed=0, grad_accum=2)
    b = PackedSlabDataset(data, seed=1, grad_accum=2)
    assert [p.micro_batches for p in a.plan(0)] != [p.micro_batches for p in b.plan(0)]
    assert _losses(data, seed=0, steps=1) != _losses(data, seed=1, steps=1)


def _lossless(x, dtype):
    return x.float().contiguous(), torch.ones((), dtype=torch.float32)


def _lossless_rows(x, dtype):
    return x.float().contiguous(), torch.ones(x.shape[0], -(-x.shape[1] // k.BLOCK))


def _lossless_tiles(w, dtype):
    return w.float().contiguous(), torch.ones(-(-w.shape[0] // k.BLOCK), -(-w.shape[1] // k.BLOCK))


@pytest.mark.parametrize("recipe", ["tensorwise", "blockwise"])
def test_lossless_fp8_run_is_the_plain_run(data, monkeypatch, recipe):
    monkeypatch.setattr(k, "_tensor_q", _lossless)
    for kind, fn in (("tensor", _lossless), ("1x128", _lossless_rows), ("128x128", _lossless_tiles)):
        monkeypatch.setitem(k._QUANT, kind, fn)
    plain, fp8 = _losses(data), _losses(data, recipe)
    assert plain == pytest.approx(fp8, rel=1e-5, abs=0)
