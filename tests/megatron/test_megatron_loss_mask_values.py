"""S36-3's class on the Megatron path: a loss_mask value other than 0/1 never becomes a loss
weight. make_thd_batch's weights are the mask itself, so a 2 or a 255 would count a target
twice or 255 times (in the loss and in num_loss_tokens), a -1 or a NaN would train on it.
- PackedSlabDataset: a slab holding 2 or 255 (at a target, a pad, a segment's first token;
  re-signed, so the shard's checksum passes) is refused by the reader as it decodes the row
  group, before any of its rows reaches a batch: one line naming the shard, row group, row and
  position, whether slabs pass through or merge under micro_batch_tokens.
- make_thd_batch (public) on a caller's own arrays: refused naming loss_mask, value, position."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core")

from slab_support import load_rows, read_manifest, save_rows, write_pack  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.errors import PacktoolError, PacktoolInputError  # noqa: E402
from packtool.megatron.dataset import PackedSlabDataset  # noqa: E402
from packtool.megatron.thd import make_thd_batch  # noqa: E402

ALIGN = Alignment(capacity=128, cp=2)  # segments padded to multiples of 4: pads inside slabs


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    out, _ = write_pack(str(tmp_path_factory.mktemp("mask")), np.arange(20, 80), ALIGN,
                        shard_tokens=1024, group_tokens=256)
    return out


def _where(cols, r, kind) -> int:
    """A position of row r's first segment of the kind asked (write_pack: no loss on a prompt
    third, then targets; the segment's padding after its real tokens)."""
    mask, lens, cu = cols["loss_mask"][r], cols["seq_lens"][r], cols["cu_seqlens_padded"][r]
    if kind == "first token":
        return int(cu[0])
    if kind == "target":
        return int(np.flatnonzero(mask)[0])
    pads = [p for k in range(len(lens)) for p in range(int(cu[k]) + int(lens[k]), int(cu[k + 1]))]
    return pads[0]


def _edited(packed, tmp_path, value, kind):
    import shutil
    out = str(tmp_path / "copy")
    shutil.copytree(packed, out)
    shard = read_manifest(out)["shards"][-1]["file"]
    cols = load_rows(out, shard)
    r = next(i for i in range(len(cols["input_ids"])) if kind != "pad" or
             (np.diff(cols["cu_seqlens_padded"][i]) > cols["seq_lens"][i]).any())
    p = _where(cols, r, kind)
    cols["loss_mask"][r] = cols["loss_mask"][r].copy()
    cols["loss_mask"][r][p] = value
    save_rows(out, shard, cols)  # re-signed: the checksum holds, only the value rule can refuse it
    return out, shard, p


@pytest.mark.parametrize("budget", [None, 512], ids=["one slab per micro-batch", "merged"])
@pytest.mark.parametrize("kind", ["target", "pad", "first token"])
@pytest.mark.parametrize("value", [2, 255])
def test_the_dataset_refuses_a_slab_whose_loss_mask_is_not_0_or_1(packed, tmp_path, value, kind, budget):
    out, shard, p = _edited(packed, tmp_path, value, kind)
    ds = PackedSlabDataset(out, cp_size=1, grad_accum=4, micro_batch_tokens=budget)
    with pytest.raises(PacktoolError) as e:
        for _ in ds.steps(max_steps=ds.steps_per_epoch()):
            pass
    msg = str(e.value)
    assert "\n" not in msg and f"{shard} row group " in msg and f" position {p}: " in msg, msg
    said = {"target": "a loss_mask value other than 0 or 1", "pad": "loss on a pad position",
            "first token": "loss on a segment's first token"}[kind]
    assert said in msg and "packtool verify" in msg, msg


def _batch(mask):
    ids = np.arange(1, 9)
    return make_thd_batch(ids, mask, np.array([5, 3]), np.array([5, 3]))


BAD = [(np.uint8, 2), (np.uint8, 255), (np.int64, -1), (np.int64, -100), (np.float32, 0.5),
       (np.float32, 2.0), (np.float32, np.nan), (np.float64, np.inf)]


@pytest.mark.parametrize("dtype,value", BAD, ids=[f"{np.dtype(d).name}-{v}" for d, v in BAD])
def test_make_thd_batch_refuses_a_mask_value_other_than_0_or_1(dtype, value):
    mask = np.array([0, 1, 1, 1, 1, 0, 1, 1], dtype)
    mask[6] = value
    with pytest.raises(PacktoolInputError) as e:
        _batch(mask)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("loss_mask holds ") and "at micro-batch position 6:" in msg, msg


@pytest.mark.parametrize("dtype", [np.bool_, np.uint8, np.int64, np.float32])
def test_make_thd_batch_takes_a_0_1_mask_of_every_dtype(dtype):
    b = _batch(np.array([0, 1, 1, 1, 1, 0, 1, 1], dtype))
    assert b.num_loss_tokens == 6 and b.loss_weight.tolist() == [[1, 1, 1, 1, 0, 1, 1, 0]]


def test_the_unedited_output_reads_through(packed):
    ds = PackedSlabDataset(packed, cp_size=1, grad_accum=4, micro_batch_tokens=512)
    read = sum(st.loss_tokens for st in ds.steps(max_steps=ds.steps_per_epoch()))
    assert read == int(ds.index.num_loss_tokens.sum()) > 0
