"""S50B-5: `train --tp 2 --device cpu` (TRAINING.md's multi-process line with its CPU smoke
flags) ended on every rank in "internal error (a packtool bug) ... Torch not compiled with CUDA
enabled", exit 3, at the first forward: sequence parallelism was on whenever TP was, and
megatron-core's reduce-scatters through CUDA. On the CPU it is now off by default, said once,
and refused in one line when asked for."""
from __future__ import annotations

import pytest

pytest.importorskip("megatron.core")
from megatron_slabs import greedy_bins, random_sequences, write_slab_dir  # noqa: E402
from spawned_ranks import join_gloo, spawn_ranks  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.errors import PacktoolConfigError  # noqa: E402

SHAPE = dict(layers=1, hidden=32, heads=2, ffn=64, vocab=128)


def _data(tmp_path, sp: bool) -> str:
    align = Alignment(capacity=64, tp=2, sp=sp)
    seqs = random_sequences(16, 3, 30, seed=5)
    return str(write_slab_dir(str(tmp_path / "d"), seqs, greedy_bins(seqs, align), align))


def _worker(rank, init, data, out):
    from packtool import notes
    from packtool.megatron.loop import TrainConfig, train
    from packtool.megatron.model import GPTShape
    join_gloo(rank, 2, init)
    start = notes.mark()
    try:
        train(TrainConfig(data_dir=data, shape=GPTShape(**SHAPE), tp=2, steps=2, quiet=True, device="cpu"))
        said = "finished\n" + "\n".join(notes.since(start))
    except Exception as e:  # noqa: BLE001  (the test reads what each rank raised)
        said = f"{type(e).__name__}: {e}"
    with open(f"{out}.{rank}", "w") as f:
        f.write(said)


@pytest.mark.parametrize("packed_sp", [True, False], ids=["slabs packed with sp", "without"])
def test_tp2_on_the_cpu_trains_without_sequence_parallelism_and_says_so(tmp_path, packed_sp):
    out = str(tmp_path / "said")
    codes = spawn_ranks(_worker, 2, (str(tmp_path / "init"), _data(tmp_path, packed_sp), out))
    assert codes == [0, 0], codes
    for r in range(2):
        said = open(f"{out}.{r}").read()
        assert said.startswith("finished") and ("sequence parallelism off" in said) == (r == 0), (r, said)


def test_sp_asked_for_on_the_cpu_is_refused_before_any_work(tmp_path):
    from packtool.megatron.loop import TrainConfig, train
    from packtool.megatron.model import GPTShape
    with pytest.raises(PacktoolConfigError, match=r"sp=True with device='cpu'.*needs CUDA; pass sp=False") as e:
        train(TrainConfig(data_dir=_data(tmp_path, True), shape=GPTShape(**SHAPE), tp=2, sp=True, device="cpu"))
    assert "\n" not in str(e.value)
