"""S48B-5 (S47B-7's class, the doors after the decode): an allocation failing past the guarded
shard decode was a bare `pyarrow.lib.ArrowMemoryError` / numpy `MemoryError` naming nothing: the
reader's column assembly (`combine_chunks` of the decoded row group, the checks' passes),
SlabDataset's copies of a slab, SlabCollator's batch, PackedSlabDataset's THD micro-batch. A
training script catching `DecodeOutOfMemory` to say "give the process more memory" missed them.

Each door now says it as the decode does (free_memory.out_of_memory): a DecodeOutOfMemory (a
MemoryError: the CLI's resources line) naming the shard and row group, the slab, or the batch
and its tokens, what could not be allocated, that the data is not at fault, and what helps there.
The failure is made where each door allocates, in the forms it takes (Arrow's MemoryError, numpy's,
torch's CPU allocator's RuntimeError); the real thing under `ulimit -v` is
/work/notes/s48/repro/B/b5_oom_doors.sh."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from slab_support import write_pack

import packtool
from packtool.align import Alignment
from packtool.free_memory import DecodeOutOfMemory

LENGTHS = np.random.default_rng(7).integers(5, 60, 40)
FORMS = {
    "arrow": (lambda: pa.ArrowMemoryError("malloc of size 32000000 failed"), "30.5 MiB"),
    "numpy": (lambda: MemoryError("Unable to allocate 61.0 MiB for an array with shape (8000000,) and data type "
                                  "int64"), "61.0 MiB"),
    "torch": (lambda: RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate "
                                   "memory: you tried to allocate 64000000 bytes. Error code 12"), "61.0 MiB"),
}


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return write_pack(str(tmp_path_factory.mktemp("oom")), LENGTHS, Alignment(capacity=128))[0]


def _fail(*a, form="arrow", **k):
    raise FORMS[form][0]()


class _Boom(np.ndarray):
    """A slab's array whose copy fails (numpy's copy cannot be patched on ndarray itself)."""

    def copy(self, *a, **k):
        _fail(form=self.form)


def _reader_assembly(monkeypatch, form):
    import packtool.slabs.reader as reader
    monkeypatch.setattr(reader, "_list_column", lambda *a: _fail(form=form))


def _item_copies(monkeypatch, form):
    from packtool.slabs.reader import SlabReader
    row = SlabReader.row

    def boom(self, i):
        r = row(self, i)
        r.input_ids = r.input_ids.view(_Boom)
        r.input_ids.form = form
        return r
    monkeypatch.setattr(SlabReader, "row", boom)


def _collator_batch(monkeypatch, form):
    import packtool.hf.collator as collator
    monkeypatch.setattr(collator, "slab_features", lambda *a, **k: _fail(form=form))


def _thd_batch(monkeypatch, form):
    import packtool.megatron.dataset as dataset
    monkeypatch.setattr(dataset, "make_thd_batch", lambda *a, **k: _fail(form=form))


def _reader(d):
    from packtool.slabs.format import SlabManifest
    from packtool.slabs.reader import SlabIndex, SlabReader
    m = SlabManifest.read(d)
    return SlabReader(m, SlabIndex.build(m)).row(0)


def _dataset(d):
    return pytest.importorskip("packtool.hf").SlabDataset(d)[0]


def _collate(d):
    hf = pytest.importorskip("packtool.hf")
    ds = hf.SlabDataset(d)
    return hf.SlabCollator()([ds[0], ds[1]])


def _megatron(d):
    pytest.importorskip("torch")
    from packtool.megatron.dataset import PackedSlabDataset
    return next(PackedSlabDataset(d).steps())


# door -> (where the allocation fails, the consumers that reach it, words the line must hold)
DOORS = {
    "reader assembly": (_reader_assembly, {"reader": _reader, "SlabDataset": _dataset, "inspect": packtool.inspect,
                                           "megatron": _megatron}, ("slabs-0000", "row group ", "decoding it")),
    "SlabDataset item": (_item_copies, {"SlabDataset": _dataset}, ("slabs-0000", "SlabDataset item 0", "tokens")),
    "SlabCollator": (_collator_batch, {"SlabCollator": _collate},
                     ("SlabCollator", "collating a batch of 2 slab(s)", "per_device_train_batch_size")),
    "THD micro-batch": (_thd_batch, {"megatron": _megatron}, ("building the micro-batch of slabs", "tokens")),
}
CASES = [(d, c) for d, (_, cs, _) in DOORS.items() for c in cs]
# Arrow's form is met where Arrow allocates (the reader's assembly); numpy's and torch's past it
FORMS_AT = {"reader assembly": ("arrow", "numpy"), "SlabDataset item": ("numpy",),
            "SlabCollator": ("numpy", "torch"), "THD micro-batch": ("numpy", "torch")}


@pytest.mark.parametrize(("door", "consumer", "form"), [(d, c, f) for d, c in CASES for f in FORMS_AT[d]],
                         ids=[f"{d}-{c}-{f}" for d, c in CASES for f in FORMS_AT[d]])
def test_an_allocation_failed_past_the_decode_is_out_of_memory_naming_where(out, monkeypatch, door, consumer, form):
    fail_at, consumers, words = DOORS[door]
    fail_at(monkeypatch, form)
    with pytest.raises(MemoryError) as e:
        consumers[consumer](out)
    msg = str(e.value)
    assert isinstance(e.value, DecodeOutOfMemory), f"{type(e.value).__name__}: {msg}"
    assert "out of memory" in msg and f"could not allocate {FORMS[form][1]}" in msg and "\n" not in msg, msg
    assert "is not at fault: give the process more memory" in msg and "corrupt" not in msg, msg
    assert all(w in msg for w in words), msg


class OutOfMemoryError(RuntimeError):
    """torch.OutOfMemoryError's name and module, by which failed_allocation knows it (no torch import)."""


OutOfMemoryError.__module__ = "torch"

# an accelerator's memory, not this process's: torch's words (the caching allocator's, a CUDA runtime
# call's: context, cuBLAS workspace, NCCL; MPS's, XPU's, ROCm's) and its class with no such words (RB-3)
DEVICE_OOM = {
    "cuda_allocator": lambda: RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    "cuda_runtime": lambda: RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously "
                                         "reported"),
    "mps": lambda: RuntimeError("MPS backend out of memory (MPS allocated: 8.00 GB, other allocations: 1.00 MB)"),
    "xpu": lambda: RuntimeError("XPU out of memory. Tried to allocate 2.00 GiB"),
    "hip": lambda: RuntimeError("HIP out of memory. Tried to allocate 2.00 GiB"),
    "nccl": lambda: RuntimeError("NCCL error in: ProcessGroupNCCL.cpp:1275, unhandled cuda error, NCCL version 2.20.5\n"
                                   "ncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\n"
                                   "Cuda failure 2 'out of memory'"),
    "triton": lambda: RuntimeError("Triton Error [CUDA]: out of memory"),
    "torch_class": lambda: OutOfMemoryError("allocation on device 0 failed"),
}


@pytest.mark.parametrize("form", list(DEVICE_OOM))
def test_an_error_that_is_no_allocation_passes_through(out, monkeypatch, form):
    """A device's out of memory passes through as torch says it: never this process's memory, whose
    fix (raise the limit) would be wrong."""
    hf = pytest.importorskip("packtool.hf")
    import packtool.hf.collator as collator
    from packtool.free_memory import failed_allocation
    assert failed_allocation(DEVICE_OOM[form]()) is None
    ds = hf.SlabDataset(out)
    raised = DEVICE_OOM[form]()

    def other(*a, **k):
        raise raised
    monkeypatch.setattr(collator, "slab_features", other)
    with pytest.raises(RuntimeError) as e:
        hf.SlabCollator()([ds[0]])
    assert e.value is raised and not isinstance(e.value, DecodeOutOfMemory)
