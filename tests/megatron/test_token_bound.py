"""S35-3: token ids of an output packed without a tokenizer (no vocab_size in its manifest) are held
to the trainer's bound (the model's vocabulary, or --vocab-size) by the reader, in check_group's one
reduction over each decoded row group's ids: no pass of its own over every shard's input_ids at
train start (`largest_id`, gone). An id over the bound is refused at the group that holds it, before
any of its rows reaches a batch: one line naming the shard, row, position and id."""
from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

pytest.importorskip("torch")

from read_counts import count_decodes  # noqa: E402
from slab_support import VOCAB, load_rows, read_manifest, save_manifest, save_rows, write_pack  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.errors import PacktoolConfigError  # noqa: E402
from packtool.slabs.format import SlabManifest  # noqa: E402


@pytest.fixture(scope="module")
def ids_only(tmp_path_factory):
    """An output of several shards and row groups whose manifest records no tokenizer (pads 0),
    one real token of its last shard's last slab raised above every other id (re-signed), so that
    the bound is met there alone: (folder, that id, its shard's file name, its row group)."""
    out, _ = write_pack(str(tmp_path_factory.mktemp("ids")), np.arange(20, 80), Alignment(capacity=128),
                        shard_tokens=1024, group_tokens=256)
    m = read_manifest(out)
    assert len(m["shards"]) >= 2
    shard = m["shards"][-1]["file"]
    cols = load_rows(out, shard)
    top = VOCAB + 5
    cols["input_ids"][-1][1] = top  # a real token: every slab's first segment starts at 0, >= 2 long
    save_rows(out, shard, cols)
    m = read_manifest(out)
    m["tokenizer"] = {}
    for s in m["shards"]:  # an output of older packtool: no max recorded, so the bound is met mid-run
        del s["max_token_id"]  # (a recorded max is refused at start: test_max_token_id.py)
    save_manifest(out, m)
    pf = pq.ParquetFile(f"{out}/{shard}")
    return out, top, shard, pf.num_row_groups - 1


def _reader(out, top):
    from packtool.slabs.reader import SlabIndex, SlabReader
    sm = SlabManifest.read(out)
    r = SlabReader(sm, SlabIndex.build(sm))
    r.bound_ids(top, f"the bound {top}: a test's")
    return [r.row(i).input_ids.max() for i in range(len(r.index))]


def _dataset(out, top, vocab_size=None):
    from packtool.megatron.dataset import PackedSlabDataset, check_token_ids
    ds = PackedSlabDataset(out, grad_accum=2)
    check_token_ids(ds, 10**6 if vocab_size else top, top if vocab_size else None, "the model shape")
    return [st.real_tokens for st in ds.steps(max_steps=ds.steps_per_epoch())]


ENTRIES = {"SlabReader.bound_ids": _reader, "dataset, the model's vocabulary": _dataset,
           "dataset, vocab_size": lambda out, top: _dataset(out, top, vocab_size=True)}


@pytest.mark.parametrize("entry", list(ENTRIES))
def test_an_id_over_the_bound_is_refused_at_its_group(ids_only, entry):
    out, top, shard, group = ids_only
    ENTRIES[entry](out, top + 1)  # every id below: read through
    with pytest.raises(PacktoolConfigError) as e:
        ENTRIES[entry](out, top)
    msg = str(e.value)
    assert "\n" not in msg and f"{shard} row group {group} row " in msg and f"token id {top} is not below" in msg, msg
    said = {"SlabReader.bound_ids": f"the bound {top}", "dataset, the model's vocabulary":
            f"the vocabulary {top} of the model shape", "dataset, vocab_size": f"vocab_size={top}"}[entry]
    assert said in msg, msg


def test_train_start_reads_the_ids_once(ids_only, monkeypatch):
    """train() on such an output decodes input_ids only as its steps read them: one step of one
    slab, one row group (the scan of every shard's ids at start went)."""
    from packtool.megatron.loop import TrainConfig, train
    from packtool.megatron.model import GPTShape
    out, top, _, _ = ids_only
    seen = count_decodes(monkeypatch)
    train(TrainConfig(data_dir=out, shape=GPTShape(layers=1, hidden=32, heads=2, ffn=64, vocab=top + 1, max_seq=256),
                      steps=1, quiet=True))
    assert seen["input_ids"] == 1, dict(seen)
