"""S41-1: slab rows read without packtool's reader (`datasets` rows, raw Parquet, arrays given to
`slab_features` / `slab_side_features`) are held to the per-slab rules a row alone can prove,
as loss_mask already was: a swapped or doubled seq_lens, a shifted cu_seqlens_padded, ids that
are no token ids, float or str ids, edited copies of the layout. Each is one PacktoolInputError
line naming the column and `packtool verify`, never wrong position_ids/labels or an IndexError."""
from __future__ import annotations

import glob
import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("torch")

from slab_support import write_pack  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.errors import PacktoolInputError  # noqa: E402
from packtool.hf import SlabCollator, slab_features, slab_side_features  # noqa: E402


def _good():
    # segments of 4 and 2 real tokens in padded lengths 5 and 5: 4 tokens of pad in all
    return {"input_ids": np.array([5, 6, 7, 8, 0, 9, 10, 0, 0, 0]),
            "loss_mask": np.array([0, 1, 1, 1, 0, 0, 1, 0, 0, 0], np.uint8),
            "seq_lens": np.array([4, 2]), "cu_seqlens_padded": np.array([0, 5, 10]),
            "cu_seqlens": np.array([0, 4, 6]), "num_tokens": 6}


def _set(col, fn):
    def edit(r):
        r[col] = fn(r[col])
        return r
    return edit


DAMAGE = {  # name: (edit, words the line names)
    "seq_lens swapped": (_set("seq_lens", lambda v: v[::-1].copy()), "seq_lens"),
    "seq_lens doubled": (_set("seq_lens", lambda v: v * 2), "seq_lens"),
    "cu_seqlens_padded shifted +1": (_set("cu_seqlens_padded", lambda v: v + 1), "cu_seqlens_padded"),
    "cu_seqlens_padded inner offset -1": (_set("cu_seqlens_padded", lambda v: np.array([0, 4, 10])), "pad"),
    "cu_seqlens_padded one offset short": (_set("cu_seqlens_padded", lambda v: v[:2].copy()), "cu_seqlens_padded"),
    "loss_mask one short": (_set("loss_mask", lambda v: v[:-1].copy()), "loss_mask"),
    "input_ids -100 under loss": (_set("input_ids", lambda v: np.where(np.arange(10) == 2, -100, v)), "input_ids"),
    "input_ids over int32": (_set("input_ids", lambda v: np.where(np.arange(10) == 2, 10 ** 10, v)), "input_ids"),
    "input_ids float": (_set("input_ids", lambda v: v + 0.5), "input_ids"),
    "input_ids str": (_set("input_ids", lambda v: v.astype(str)), "input_ids"),
    "seq_lens float": (_set("seq_lens", lambda v: v.astype(float)), "seq_lens"),
}
COPIES = {  # the row's own copies of its layout: checked by the collator
    "cu_seqlens edited": (_set("cu_seqlens", lambda v: np.array([0, 3, 6])), "cu_seqlens"),
    "num_tokens edited": (_set("num_tokens", lambda v: 7), "num_tokens"),
}
SLAB = ("input_ids", "loss_mask", "seq_lens", "cu_seqlens_padded")
CALLS = {
    "slab_features": lambda r, k: slab_features(*(r[c] for c in SLAB), keep_pads=k),
    "SlabCollator": lambda r, k: SlabCollator(keep_pads=k)([r]),
    "SlabCollator, datasets lists": lambda r, k: SlabCollator(keep_pads=k)(
        [{c: (v.tolist() if isinstance(v, np.ndarray) else v) for c, v in r.items()}]),
}


def _refused(call, row, keep_pads, words):
    with pytest.raises(PacktoolInputError) as e:
        call(row, keep_pads)
    msg = str(e.value)
    assert "\n" not in msg and words in msg and "packtool verify" in msg, msg


@pytest.mark.parametrize("keep_pads", [False, True])
@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_row_layout_is_refused_in_one_line(damage, call, keep_pads):
    edit, words = DAMAGE[damage]
    _refused(CALLS[call], edit(_good()), keep_pads, words)


@pytest.mark.parametrize("call", ["SlabCollator", "SlabCollator, datasets lists"])
@pytest.mark.parametrize("damage", COPIES)
def test_an_edited_copy_of_the_layout_is_refused(damage, call):
    edit, words = COPIES[damage]
    _refused(CALLS[call], edit(_good()), False, words)


@pytest.mark.parametrize("damage", ["cu_seqlens_padded one offset short", "seq_lens doubled", "cu_seqlens_padded shifted +1"])
def test_side_features_refuse_the_same_layout(damage):
    r = DAMAGE[damage][0](_good())
    with pytest.raises(PacktoolInputError, match="packtool verify"):
        slab_side_features(np.zeros(10, np.float32), r["seq_lens"], r["cu_seqlens_padded"], 0.0)


def test_a_good_row_still_gives_its_batch():
    b = SlabCollator()([_good()])
    assert b["position_ids"][0].tolist() == [0, 1, 2, 3, 0, 1]
    assert b["labels"][0].tolist() == [-100, 6, 7, 8, -100, 10]


def test_the_findings_datasets_example_swapped_seq_lens_is_refused(tmp_path):
    """S41-1's own case: two segment lengths of a real slab row swapped, read with datasets."""
    datasets = pytest.importorskip("datasets")
    out, _ = write_pack(str(tmp_path), np.random.default_rng(3).integers(20, 120, 30), Alignment(cp=2, capacity=256))
    shard = sorted(glob.glob(os.path.join(out, "slabs-*.parquet")))[0]
    before = open(shard, "rb").read()
    good = datasets.load_dataset("parquet", data_files=shard, cache_dir=str(tmp_path / "c1"))["train"]
    SlabCollator()([good[0]])  # an undamaged row passes
    t = pq.read_table(shard)
    sl = t.column("seq_lens").to_pylist()
    row = next(i for i, v in enumerate(sl) if len(v) > 1 and v[0] != v[1])
    sl[row][0], sl[row][1] = sl[row][1], sl[row][0]
    f = t.schema.field("seq_lens")
    dmg = tmp_path / "dmg.parquet"
    pq.write_table(t.set_column(t.schema.get_field_index("seq_lens"), f, pa.array(sl, type=f.type)), dmg)
    ds = datasets.load_dataset("parquet", data_files=str(dmg), cache_dir=str(tmp_path / "c2"))["train"]
    with pytest.raises(PacktoolInputError, match=r"seq_lens.*packtool verify"):
        SlabCollator()([ds[row]])
    assert open(shard, "rb").read() == before
    shutil.rmtree(tmp_path / "c1"), shutil.rmtree(tmp_path / "c2")
