"""`packtool train` with a model that cannot fit (S36-15): refused before the model is built, with
the estimate, whichever way the shape came (flags, --config, the library's shape=, several TP
ranks); an allocation torch fails later is the README's out-of-memory line (kind resources,
exit 2), not "internal error (a packtool bug)"."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("megatron.core")
pytest.importorskip("typer")
import torch  # noqa: E402
from megatron_runs import run_cli, small_slabs  # noqa: E402

from packtool.megatron.loop import TrainConfig, train  # noqa: E402
from packtool.megatron.model import GPTShape  # noqa: E402

HUGE = dict(layers=2, hidden=65536, heads=4)  # ~110G parameters: 1.6 TiB of training state


@pytest.fixture(scope="module")
def slabs(tmp_path_factory):
    return small_slabs(tmp_path_factory.mktemp("c") / "d", fp8="tensorwise")


@pytest.fixture
def no_build(monkeypatch):
    import packtool.megatron.loop as loop

    def refuse(*a, **k):
        raise AssertionError("the model was built")
    monkeypatch.setattr(loop, "build_gpt", refuse)


def _cli(slabs, tmp_path, *flags):
    r = run_cli(["train", slabs, "--device", "cpu", "--steps", "1", *flags])
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.exit_code == 2 and len(errors) == 1 and "internal" not in errors[0], r.output
    return errors[0]


WAYS = ["flags", "--config", "library shape="]


@pytest.mark.parametrize("way", WAYS)
def test_a_model_that_cannot_fit_is_refused_before_it_is_built(slabs, tmp_path, no_build, way):
    if way == "library shape=":
        with pytest.raises(MemoryError, match=r"needs at least [\d,.]+ GiB .* smaller model"):
            train(TrainConfig(data_dir=slabs, shape=GPTShape(**HUGE, ffn=174784, vocab=128), steps=1, quiet=True))
        return
    if way == "--config":
        (tmp_path / "m.yaml").write_text("".join(f"{k}: {v}\n" for k, v in HUGE.items()))
        flags = ["--config", str(tmp_path / "m.yaml")]
    else:
        flags = [f"--{k}={v}" for k, v in HUGE.items()]
    line = _cli(slabs, tmp_path, *flags)
    assert "out of memory in `packtool train`" in line and "needs at least" in line and "65536" in line, line


ALLOC = {  # what torch's allocators raise when an allocation fails
    "cpu": RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
                        "memory: you tried to allocate 13186891776 bytes. Error code 12 (Cannot allocate memory)"),
    "cuda": torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 12.28 GiB. GPU 0 has a total "
                                        "capacity of 139.8 GiB of which 1.2 GiB is free."),
}


@pytest.mark.parametrize("where", ["building the model", "a step"])
@pytest.mark.parametrize("allocator", list(ALLOC))
def test_an_allocation_torch_fails_is_the_out_of_memory_line(slabs, tmp_path, monkeypatch, where, allocator):
    import packtool.megatron.loop as loop

    def fail(*a, **k):
        raise ALLOC[allocator]
    monkeypatch.setattr(loop, "build_gpt" if where == "building the model" else "loss_sum", fail)
    line = _cli(slabs, tmp_path, "--layers", "1", "--hidden", "32", "--heads", "2", "--json-log",
                str(tmp_path / "l.jsonl"))
    assert "out of memory in `packtool train`" in line and "torch could not allocate" in line, line
    assert ("12.3 GiB" if allocator == "cpu" else "12.28 GiB") in line, line


def test_the_refusal_is_kind_resources_and_counts_the_tensor_parallel_split(slabs, monkeypatch, no_build):
    import packtool.megatron.memory as memory
    from packtool.cli.failure import describe
    with pytest.raises(MemoryError) as e:
        train(TrainConfig(data_dir=slabs, shape=GPTShape(**HUGE, ffn=174784, vocab=128), steps=1, quiet=True))
    assert describe(e.value)[0] == "resources" and describe(e.value)[2] == 2
    shape = GPTShape(layers=2, hidden=1024, heads=4, ffn=2816, vocab=50304)
    monkeypatch.setattr(memory, "_room", lambda device: (shape.params() * 16 // 2 + 1, "a test's memory"))
    memory.check_fits(shape, 2, "cpu")  # half the state per rank fits
    with pytest.raises(MemoryError, match="a test's memory"):
        memory.check_fits(shape, 1, "cpu")


# an accelerator's out of memory in torch's other words: a CUDA runtime call's (context, cuBLAS
# workspace, NCCL), MPS's, XPU's, ROCm's, and its class with no such words (RB-3's rule at the
# train door: one owner, free_memory.device_out_of_memory)
DEVICE_OOM = {
    "cuda_runtime": RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported"),
    "mps": RuntimeError("MPS backend out of memory (MPS allocated: 8.00 GB, other allocations: 1.00 MB)"),
    "xpu": RuntimeError("XPU out of memory. Tried to allocate 2.00 GiB"),
    "hip": RuntimeError("HIP out of memory. Tried to allocate 2.00 GiB"),
    "nccl": RuntimeError("NCCL error in: ProcessGroupNCCL.cpp:1275, unhandled cuda error, NCCL version 2.20.5\n"
                                   "ncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\n"
                                   "Cuda failure 2 'out of memory'"),
    "triton": RuntimeError("Triton Error [CUDA]: out of memory"),
    "torch_class": torch.OutOfMemoryError("allocation on device 0 failed"),
}


@pytest.mark.parametrize("form", list(DEVICE_OOM))
def test_an_accelerators_out_of_memory_in_any_words_is_the_out_of_memory_line(form):
    """Not "internal error (a packtool bug)", exit 3: the train's own memory line, naming the device."""
    from packtool.megatron.memory import TrainOutOfMemory, torch_allocations
    with pytest.raises(TrainOutOfMemory, match=r"^torch could not allocate .+ on cuda:0$"):
        with torch_allocations("cuda:0"):
            raise DEVICE_OOM[form]
