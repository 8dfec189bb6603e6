"""S50B-1 + RB-5 + S50B-6: an output or a slab of nothing to train gets one verdict at every door.
S49B-4 closed "every listed shard holds 0 rows"; a manifest listing no shard at all (the same output,
after a merge tool drops the 0-row files) passed verify and read as 0 slabs (to_hf blamed the
caller's cache_dir); a fixed-length slab holding only its fill segment passed verify and FORMAT.md's
reader, then every packtool reader called it "damaged or edited: run packtool verify" (train after a
step); a slab of no segment at all broke FORMAT.md's reader with numpy's bare errors. Each form here
goes to verify and every consumer, which must all refuse it in the same words."""
from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("datasets")

from slab_support import format_reader, load_rows, read_manifest, resign, save_manifest, save_rows, write_pack  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.errors import PacktoolError  # noqa: E402

NO_SLAB, NO_SEGMENT = "holds no slab", "no real segment"


def _zero_stats(man: dict) -> None:
    for k, v in man["stats"].items():
        if isinstance(v, int) and not isinstance(v, bool):
            man["stats"][k] = 0
    man["stats"]["dp_imbalance"] = 0.0


def _shards_of_no_rows(tmp_path) -> str:
    out, _ = write_pack(str(tmp_path / "p"), [40, 70], Alignment(capacity=128))
    man = read_manifest(out)
    for e in man["shards"]:
        cols = load_rows(out, e["file"])
        save_rows(out, e["file"], {k: v[:0] for k, v in cols.items()}, sign=False)
        e.update(rows=0, tokens=0, loss_tokens=0)
    save_manifest(out, man)
    for e in man["shards"]:
        resign(out, e["file"])
    return out


def _no_shard(tmp_path) -> str:
    """A merge tool's empty result: `"shards": []`, the files gone, every count 0."""
    out, _ = write_pack(str(tmp_path / "p"), [40, 70], Alignment(capacity=128))
    man = read_manifest(out)
    for e in man["shards"]:
        os.remove(os.path.join(out, e["file"]))
    man["shards"] = []
    _zero_stats(man)
    save_manifest(out, man)
    return out


def _one_more_slab(tmp_path, align: Alignment, row: dict, physical: int) -> str:
    """An output with one more slab, `row`'s list columns, appended as the next slab number, every
    count of the manifest kept true (so only the slab's own form is wrong)."""
    out, _ = write_pack(str(tmp_path / "p"), [40, 70, 90], align)
    man = read_manifest(out)
    shard = man["shards"][-1]["file"]
    cols = load_rows(out, shard)
    n = man["stats"]["slabs"]
    scalars = dict(num_tokens=0, num_loss_tokens=0, layout_pad=0, tail_pad=0, fill_pad=physical, singleton=False,
                   slab_index=n, dp_rank=0, step=n, microbatch=0)
    for k in cols:
        cols[k] = cols[k] + [np.asarray(row[k]) if k in row else type(cols[k][0])(scalars[k])]
    save_rows(out, shard, cols, sign=False)
    man["stats"]["slabs"] += 1
    man["stats"]["physical_tokens"] += physical
    man["stats"]["fill_pad"] += physical
    man["shards"][-1]["tokens"] += physical
    save_manifest(out, man)
    resign(out, shard)
    return out


def _fill_only_slab(tmp_path) -> str:
    L = 128
    return _one_more_slab(tmp_path, Alignment(capacity=L, fixed_length=L),
                          dict(input_ids=[0] * L, loss_mask=[0] * L, seq_lens=[0], cu_seqlens=[0, 0],
                               cu_seqlens_padded=[0, L], cp_offsets=[0, L], source_index=[-1], chunk_index=[-1],
                               source_offset=[0]), L)


def _no_segment_slab(tmp_path) -> str:
    empty = np.zeros(0, np.int64)
    return _one_more_slab(tmp_path, Alignment(capacity=128),
                          dict(input_ids=empty, loss_mask=empty, seq_lens=empty, cu_seqlens=[0],
                               cu_seqlens_padded=[0], cp_offsets=[0], source_index=empty, chunk_index=empty,
                               source_offset=empty), 0)


FORMS = {"shards_of_no_rows": (_shards_of_no_rows, NO_SLAB), "no_shard": (_no_shard, NO_SLAB),
         "fill_only_slab": (_fill_only_slab, NO_SEGMENT), "no_segment_slab": (_no_segment_slab, NO_SEGMENT)}


def _every_slab(ds):
    return [ds[i] for i in range(len(ds))]


def _format_reader(out, tmp):
    fr = format_reader()
    man = fr.open_output(out)
    return [fr.read_slab_for_cp_rank(out, s["file"], r, 0, man) for s in man["shards"] for r in range(s["rows"])]


def _megatron(out, tmp):
    pytest.importorskip("megatron.core")
    from packtool.megatron.dataset import PackedSlabDataset
    ds = PackedSlabDataset(out)
    return [ds.load([i]) for i in range(len(ds.index))]


def _inspect(out, tmp):
    from packtool.inspection.packed import inspect_packed
    return inspect_packed(out, what_if=False)


def _hf(out, tmp, **kw):
    from packtool.hf import SlabDataset
    return list(SlabDataset(out).to_hf(**kw))


CONSUMERS = {
    "SlabDataset": lambda out, tmp: _every_slab(__import__("packtool.hf", fromlist=["x"]).SlabDataset(out)),
    "to_hf": lambda out, tmp: _hf(out, tmp, cache_dir=str(tmp / "hfc")),
    "to_hf_streaming": lambda out, tmp: _hf(out, tmp, streaming=True),
    "PackedSlabDataset": _megatron,
    "inspect": _inspect,
    "format_reader": _format_reader,
}


@pytest.mark.parametrize("form", list(FORMS))
def test_verify_refuses_an_output_or_slab_of_nothing_to_train(tmp_path, form):
    from packtool.verification import verify
    make, words = FORMS[form]
    report = verify(make(tmp_path), workers=1)
    assert not report.ok and any(words in p.message for p in report.problems), report.problems


@pytest.mark.parametrize("consumer", list(CONSUMERS))
@pytest.mark.parametrize("form", list(FORMS))
def test_every_consumer_refuses_it_in_the_same_words(tmp_path, form, consumer):
    make, words = FORMS[form]
    out = make(tmp_path)
    with pytest.raises((PacktoolError, ValueError)) as e:
        CONSUMERS[consumer](out, tmp_path)
    said = str(e.value)
    assert e.type is not ValueError or consumer == "format_reader", said
    assert words in said and "cache_dir" not in said and "\n" not in said, said
