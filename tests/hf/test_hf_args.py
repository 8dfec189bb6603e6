"""S35-3: packtool.hf checks its arguments at the call, before any work (README: every public
call checks its arguments; params.py the rule): SlabCollator's switches, mask_dtype and
side_columns at construction (a non-bool switch, a non-float mask dtype, a str read letter by
letter, a column listed twice or landing on a batch key), slab_features' keep_pads and
to_hf's streaming; a batch item without the slab columns (a Trainer's remove_unused_columns
stripped them) is one PacktoolInputError naming the key and the fix, never a KeyError."""
from __future__ import annotations

import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from slab_support import write_pack  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.errors import PacktoolConfigError, PacktoolInputError  # noqa: E402
from packtool.hf import SlabCollator, SlabDataset, slab_features, slab_side_features  # noqa: E402
from packtool.side import SideColumn  # noqa: E402


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return write_pack(str(tmp_path_factory.mktemp("hfargs")), [40, 70, 90, 30], Alignment(capacity=128))[0]


SLAB_KEYS = ("input_ids", "loss_mask", "seq_lens", "cu_seqlens_padded")
SWITCHES = ("keep_pads", "flash_kwargs", "seq_idx", "mask_4d")
# (arguments, the words the one line must hold)
BAD = [*((({k: v}), (k, "True or False")) for k in SWITCHES for v in (1, 0, "yes", None, np.int64(1))),
       *(((dict(mask_4d=True, mask_dtype=d)), ("mask_dtype", "floating")) for d in
         (torch.bool, torch.int64, torch.uint8, "float32", np.float32)),
       (dict(side_columns=5), ("side_columns", "got int 5")),
       (dict(side_columns=[1]), ("side_columns", "names")),
       (dict(side_columns=["a", ""]), ("side_columns", "empty name")),
       (dict(side_columns="a,"), ("side_columns", "empty name")),
       (dict(side_columns=["advantages", "advantages"]), ("'advantages' twice",)),
       (dict(side_columns="lp,lp"), ("'lp' twice",)),
       (dict(side_columns=[SideColumn("lp", "float32"), "lp"]), ("'lp' twice",)),
       (dict(side_columns=["labels"]), ("'labels'", "batch key")),
       (dict(side_columns="x,shift_x"), ("'shift_x'", "batch key")),
       (dict(side_columns=["seq_idx"], seq_idx=True), ("'seq_idx'", "batch key")),
       (dict(side_columns=["attention_mask"], mask_4d=True), ("'attention_mask'", "batch key")),
       (dict(side_columns=["cu_seq_lens_q"], flash_kwargs=True), ("'cu_seq_lens_q'", "batch key"))]


@pytest.mark.parametrize("kwargs,words", BAD, ids=[repr(k) for k, _ in BAD])
def test_the_collator_refuses_a_bad_argument_at_construction(kwargs, words):
    with pytest.raises(PacktoolConfigError) as e:
        SlabCollator(**kwargs)
    msg = str(e.value)
    assert all(w in msg for w in words) and "\n" not in msg, msg


def test_good_arguments_are_kept_normalized(out):
    ds = SlabDataset(out)
    c = SlabCollator(flash_kwargs=np.bool_(True), mask_4d=True, mask_dtype=torch.bfloat16, side_columns="a, b")
    assert c.flash_kwargs is True and c.side_columns == ("a", "b")
    assert SlabCollator(mask_4d=True, mask_dtype=torch.bfloat16)([ds[0]])["attention_mask"].dtype == torch.bfloat16
    assert SlabCollator(side_columns=ds.side_columns).side_columns == ()


@pytest.mark.parametrize("key", SLAB_KEYS)
def test_a_batch_item_missing_a_slab_column_names_it_and_the_fix(out, key):
    item = {k: v for k, v in SlabDataset(out)[0].items() if k != key}
    with pytest.raises(PacktoolInputError) as e:
        SlabCollator()([SlabDataset(out)[1], item])
    msg = str(e.value)
    assert f"batch item 1 has no {key!r}" in msg and "remove_unused_columns=False" in msg and "\n" not in msg, msg


@pytest.mark.parametrize("batch", [[], "abc", [[1, 2]], [None], 5], ids=repr)
def test_a_batch_that_is_not_slab_items_is_one_line(batch):
    with pytest.raises(PacktoolInputError) as e:
        SlabCollator()(batch)
    assert "SlabCollator" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("call", ["slab_features", "slab_side_features", "to_hf"])
def test_the_other_switches_are_checked(out, call):
    ds = SlabDataset(out)
    it = ds[0]
    calls = {"slab_features": lambda: slab_features(it["input_ids"], it["loss_mask"], it["seq_lens"],
                                                    it["cu_seqlens_padded"], keep_pads=1),
             "slab_side_features": lambda: slab_side_features(it["input_ids"], it["seq_lens"],
                                                              it["cu_seqlens_padded"], 0, keep_pads="no"),
             "to_hf": lambda: ds.to_hf(streaming=1)}
    with pytest.raises(PacktoolConfigError, match=r"^(keep_pads|streaming) must be True or False"):
        calls[call]()


@pytest.mark.parametrize("streaming", [False, True, 1])
def test_to_hf_without_datasets_is_one_line(out, monkeypatch, streaming):
    """`datasets` is an optional extra: its absence is packtool's one line naming the extra, and a
    bad switch is named first, whatever is installed (the device host has no `datasets`)."""
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    with pytest.raises(PacktoolConfigError) as e:
        SlabDataset(out).to_hf(streaming=streaming)
    want = "packtool[hf]" if isinstance(streaming, bool) else "streaming must be True or False"
    assert want in str(e.value) and "\n" not in str(e.value), str(e.value)
