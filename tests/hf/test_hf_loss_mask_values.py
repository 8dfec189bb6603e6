"""S36-3's class on the HF path: slab rows read without packtool's reader (raw Parquet or
`datasets` rows fed to `SlabCollator`, or `slab_features` called directly) whose loss_mask
holds a value other than 0/1 are refused in one line naming loss_mask and the position; `!= 0`
made 2, -1 and NaN plain targets. (SlabDataset items are checked by the slab reader.)"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from packtool.errors import PacktoolInputError  # noqa: E402
from packtool.hf import SlabCollator, slab_features  # noqa: E402


def _row(dtype, value, where):
    mask = np.array([0, 1, 1, 1, 0, 0, 1, 1, 0, 0], dtype)  # segments of 4 and 4 real tokens, 1 pad each
    mask[where] = value
    return {"input_ids": np.arange(1, 11), "loss_mask": mask, "seq_lens": np.array([4, 4]),
            "cu_seqlens_padded": np.array([0, 5, 10])}


CALLS = {
    "slab_features": lambda r, k: slab_features(r["input_ids"], r["loss_mask"], r["seq_lens"],
                                                r["cu_seqlens_padded"], keep_pads=k),
    "SlabCollator": lambda r, k: SlabCollator(keep_pads=k)([r]),
    "SlabCollator, datasets lists": lambda r, k: SlabCollator(keep_pads=k)([{c: v.tolist() for c, v in r.items()}]),
}
VALUES = [(np.uint8, 2), (np.uint8, 255), (np.int64, -1), (np.float32, 0.5), (np.float64, np.nan)]


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("keep_pads", [False, True])
@pytest.mark.parametrize("dtype,value", VALUES, ids=[f"{d.__name__}-{v}" for d, v in VALUES])
@pytest.mark.parametrize("where", [2, 4])  # a real token; a pad (dropped from the batch without keep_pads)
def test_a_slab_loss_mask_value_other_than_0_or_1_is_refused(call, keep_pads, dtype, value, where):
    with pytest.raises(PacktoolInputError) as e:
        CALLS[call](_row(dtype, value, where), keep_pads)
    msg = str(e.value)
    assert "\n" not in msg and "loss_mask holds" in msg and f"slab position {where}" in msg


@pytest.mark.parametrize("dtype", [np.uint8, np.int64, np.float32, np.bool_])
def test_a_0_1_slab_loss_mask_gives_the_labels(dtype):
    r = _row(dtype, 1, 2)
    _, labels, _ = slab_features(r["input_ids"], r["loss_mask"], r["seq_lens"], r["cu_seqlens_padded"])
    assert labels.tolist() == [-100, 2, 3, 4, -100, 7, 8, -100]
