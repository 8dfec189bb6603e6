"""A local output that `pack --overwrite` replaces while a slab reader holds it open (S45B-3):
packtool.hf's SlabDataset, the Megatron dataset and the slab reader itself read its first slab,
the folder is replaced (by an output of as many shards, or of fewer: a listed shard gone), then
the last slab is read. Each refuses it (nothing of the new output is handed out under the old
manifest) in one line saying the output changed while it was read and to open it again; never
"listed in the manifest but missing ... re-run `packtool pack`", advice to re-pack a healthy
output. The check is verify's and inspect's own (packtool.output.unchanged)."""
from __future__ import annotations

import pytest
from replaced_support import smaller, swap, tree, two_outputs

from packtool.errors import PacktoolError


def _hf(out):
    from packtool.hf import SlabDataset
    ds = SlabDataset(out)
    return lambda: ds[0], lambda: ds[len(ds) - 1]


def _megatron(out):
    pytest.importorskip("torch")
    from packtool.megatron.dataset import PackedSlabDataset
    ds = PackedSlabDataset(out, grad_accum=1, micro_batch_tokens=256)
    n = ds.steps_per_epoch()
    return lambda: next(iter(ds.steps(max_steps=1))), lambda: list(ds.steps(start_step=n - 1, max_steps=1))


def _slab_reader(out):
    from packtool.slabs.format import SlabManifest
    from packtool.slabs.reader import SlabIndex, SlabReader
    m = SlabManifest.read(out)
    r = SlabReader(m, SlabIndex.build(m))
    return lambda: r.row(0), lambda: r.row(len(r.index) - 1)


READERS = {"hf": _hf, "megatron-dataset": _megatron, "slab-reader": _slab_reader}


@pytest.mark.parametrize("to", ["as many shards", "fewer shards"])
@pytest.mark.parametrize("reader", list(READERS))
def test_a_reader_says_the_output_was_replaced(tmp_path, reader, to):
    a, b = two_outputs(tmp_path)
    first, last = READERS[reader](a)
    first()
    swap(a, b if to == "as many shards" else smaller(b))
    with pytest.raises(PacktoolError) as e:
        last()
    msg = str(e.value)
    assert "\n" not in msg and "the output changed while it was read" in msg and "open it again" in msg, msg
    assert "re-run `packtool pack`" not in msg and msg.count(a) == 1, msg


@pytest.mark.parametrize("reader", list(READERS))
def test_an_untouched_output_reads_to_its_end(tmp_path, reader):
    a, _ = two_outputs(tmp_path)
    before = tree(a)
    first, last = READERS[reader](a)
    first()
    last()
    assert tree(a) == before
