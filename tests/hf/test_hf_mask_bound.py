"""S36-18 (issue 23 class 3): `SlabCollator(mask_4d=True)` builds T x T elements per batch; a
mask that cannot fit (the machine's available memory, `ulimit -v`, or an allocation that fails
all the same) is one PacktoolConfigError naming mask_4d with the estimate, never torch's
allocator RuntimeError from inside a DataLoader worker. In-process: the room is stood in for."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import packtool.hf.mask as hf_mask  # noqa: E402
import packtool.tokenize.long_rows as long_rows  # noqa: E402
from packtool.errors import PacktoolConfigError  # noqa: E402
from packtool.hf import SlabCollator  # noqa: E402

N, PADDED = 700, 704  # tokens and physical length of each slab's one segment


def _slab():
    return {"input_ids": np.arange(1, PADDED + 1), "loss_mask": (np.arange(PADDED) < N).astype(np.uint8),  # no loss on the pads
            "seq_lens": np.array([N]), "cu_seqlens_padded": np.array([0, PADDED])}


def _vm_size() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))


def _no_limit(monkeypatch):
    inf = long_rows.resource.RLIM_INFINITY
    monkeypatch.setattr(long_rows.resource, "getrlimit", lambda what: (inf, inf))


def _machine(monkeypatch):  # MemAvailable below twice the mask
    _no_limit(monkeypatch)
    monkeypatch.setattr(hf_mask, "available_bytes", lambda: 1 << 20)


def _ulimit(monkeypatch):  # `ulimit -v` leaves about 1 MiB to map
    monkeypatch.setattr(hf_mask, "available_bytes", lambda: None)
    inf = long_rows.resource.RLIM_INFINITY
    left = _vm_size() + (1 << 20)
    monkeypatch.setattr(long_rows.resource, "getrlimit", lambda what: (left, inf))


def _allocator(monkeypatch):  # room looked fine, the allocation fails all the same
    _no_limit(monkeypatch)
    monkeypatch.setattr(hf_mask, "available_bytes", lambda: None)

    def full(*a, **kw):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory")
    monkeypatch.setattr(torch, "full", full)


ROOMS = {"machine": _machine, "ulimit": _ulimit, "allocator": _allocator}
DTYPES = [None, torch.float32, torch.bfloat16, torch.float16]


@pytest.mark.skipif(not hasattr(long_rows, "resource"), reason="POSIX resource limits")
@pytest.mark.parametrize("room", ROOMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("keep_pads", [False, True])
@pytest.mark.parametrize("slabs", [1, 2])
def test_a_4d_mask_that_cannot_fit_is_refused_naming_mask_4d(monkeypatch, room, dtype, keep_pads, slabs):
    ROOMS[room](monkeypatch)
    t = (PADDED if keep_pads else N) * slabs
    with pytest.raises(PacktoolConfigError) as e:
        SlabCollator(mask_4d=True, mask_dtype=dtype, keep_pads=keep_pads)([_slab() for _ in range(slabs)])
    msg = str(e.value)
    size = t * t * (4 if dtype in (None, torch.float32) else 2)
    assert "\n" not in msg and "mask_4d" in msg and f"{t:,}-token batch" in msg
    assert f"{size / 2 ** 30:.1f} GiB" in msg and "flash attention" in msg and "smaller capacity (tokens a slab holds)" in msg


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_4d_mask_with_room_is_block_causal(monkeypatch, dtype):
    _no_limit(monkeypatch)
    monkeypatch.setattr(hf_mask, "available_bytes", lambda: 1 << 34)
    m = SlabCollator(mask_4d=True, mask_dtype=dtype)([_slab(), _slab()])["attention_mask"][0, 0]
    seg = np.repeat([0, 1], N)
    want = (seg[:, None] == seg[None, :]) & np.tri(2 * N, dtype=bool)
    assert m.dtype == dtype and torch.equal(m == 0, torch.from_numpy(want))
    assert (m[~torch.from_numpy(want)] == torch.finfo(dtype).min).all()


def _loop_reference(seg: np.ndarray, dtype):
    """The per-segment build the vectorized one replaced: one triu_ per segment."""
    t = seg.size
    m = torch.full((t, t), torch.finfo(dtype).min, dtype=dtype)
    cuts = np.concatenate(([0], np.flatnonzero(np.diff(seg)) + 1, [t]))
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        m[a:b, a:b].triu_(1)
    return m[None, None]


SHAPES = {  # segment lengths of a batch, as SlabCollator's `seg` repeats them
    "one token": [1], "one segment": [37], "many 1-token segments": [1] * 29,
    "mixed": [5, 1, 12, 1, 1, 3], "padding tail": [9, 4, 3],  # keep_pads: the pad run is its own segment
    "over one band": [1500, 1, 700, 2],  # rows span several bands of _TEMP_ELEMENTS
}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64], ids=str)
def test_the_vectorized_mask_is_the_loop_reference_bit_for_bit(monkeypatch, shape, dtype):
    monkeypatch.setattr(hf_mask, "room_bytes", lambda: None)
    lens = SHAPES[shape]
    seg = np.repeat(np.arange(len(lens)), lens)
    got, want = hf_mask.block_causal_mask(seg, dtype), _loop_reference(seg, dtype)
    assert got.shape == want.shape == (1, 1, seg.size, seg.size) and got.dtype == dtype
    bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[want.element_size()]
    assert torch.equal(got.view(bits), want.view(bits))
