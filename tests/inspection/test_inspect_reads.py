"""`inspect` of a packed output decodes each small column once: the report is built from what
the reader's checks (`slabs.reader.check_rows`) read, not from a second pass over the shards.
That the checks still refuse what a reader refuses: tests/slabs/test_consumers_refuse.py."""
from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
from read_counts import count_decodes
from slab_support import write_pack

from packtool.align import Alignment
from packtool.inspection import inspect_lengths, inspect_packed
from packtool.planning.core import PackingConfig
from packtool.slabs.format import SlabManifest

# the columns the report's figures come from (never input_ids)
SMALL = ("seq_lens", "source_index", "chunk_index", "num_loss_tokens", "singleton", "dp_rank", "step",
         "layout_pad")


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    lengths = np.random.default_rng(3).integers(1, 200, 300)
    align, packing = Alignment(cp=2, capacity=512), PackingConfig("bfd", dp=2)
    out, _ = write_pack(str(tmp_path_factory.mktemp("reads")), lengths, align, packing,
                        shard_tokens=20_000, group_tokens=4_000)
    return out, lengths, align, packing


def test_inspect_decodes_each_small_column_once(packed, monkeypatch):
    out, lengths, align, packing = packed
    sm = SlabManifest.read(out)
    groups = sum(pq.ParquetFile(sm.shard_path(i)).metadata.num_row_groups for i in range(len(sm.shards)))
    assert groups >= 4  # several shards of several row groups: the counts below mean something
    seen = count_decodes(monkeypatch)
    r = inspect_packed(out)
    assert {c: seen[c] for c in SMALL} == {c: groups for c in SMALL}
    assert seen["input_ids"] == groups  # the token check ran over every row group, once
    ref = inspect_lengths(lengths, align, packing)
    assert (r.padding, r.dp, r.slabs, r.length_histogram) == (ref.padding, ref.dp, ref.slabs, ref.length_histogram)

