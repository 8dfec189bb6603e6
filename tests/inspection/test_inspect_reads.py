"""`inspect` of a packed output decodes each small column once: the report is built from what
the reader's checks (`slabs.reader.check_rows`) read, not from a second pass over the shards.
That the checks still refuse what a reader refuses: tests/slabs/test_consumers_refuse.py."""
from __future__ import annotations

import collections

import numpy as np
import pyarrow.parquet as pq
import pytest
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


def _count_decodes(monkeypatch) -> collections.Counter:
    """Row groups decoded per column, through every pyarrow entry point that decodes pages."""
    seen: collections.Counter = collections.Counter()

    def add(columns, groups):
        for c in columns or ("<all>",):
            seen[c] += groups

    def read_row_group(self, i, columns=None, **kw):
        add(columns, 1)
        return orig["rg"](self, i, columns=columns, **kw)

    def read_row_groups(self, groups, columns=None, **kw):
        add(columns, len(groups))
        return orig["rgs"](self, groups, columns=columns, **kw)

    def read(self, columns=None, **kw):
        add(columns, self.metadata.num_row_groups)
        return orig["read"](self, columns=columns, **kw)

    def iter_batches(self, batch_size=65536, row_groups=None, columns=None, **kw):
        add(columns, len(row_groups) if row_groups is not None else self.metadata.num_row_groups)
        return orig["iter"](self, batch_size=batch_size, row_groups=row_groups, columns=columns, **kw)

    def read_table(source, columns=None, **kw):
        add(columns, orig["pf"](source).metadata.num_row_groups)
        return orig["table"](source, columns=columns, **kw)

    orig = {"rg": pq.ParquetFile.read_row_group, "rgs": pq.ParquetFile.read_row_groups,
            "read": pq.ParquetFile.read, "iter": pq.ParquetFile.iter_batches, "table": pq.read_table,
            "pf": pq.ParquetFile}
    monkeypatch.setattr(pq.ParquetFile, "read_row_group", read_row_group)
    monkeypatch.setattr(pq.ParquetFile, "read_row_groups", read_row_groups)
    monkeypatch.setattr(pq.ParquetFile, "read", read)
    monkeypatch.setattr(pq.ParquetFile, "iter_batches", iter_batches)
    monkeypatch.setattr(pq, "read_table", read_table)
    return seen


def test_inspect_decodes_each_small_column_once(packed, monkeypatch):
    out, lengths, align, packing = packed
    sm = SlabManifest.read(out)
    groups = sum(pq.ParquetFile(sm.shard_path(i)).metadata.num_row_groups for i in range(len(sm.shards)))
    assert groups >= 4  # several shards of several row groups: the counts below mean something
    seen = _count_decodes(monkeypatch)
    r = inspect_packed(out)
    assert {c: seen[c] for c in SMALL} == {c: groups for c in SMALL}
    assert seen["input_ids"] == groups  # the token check ran over every row group, once
    ref = inspect_lengths(lengths, align, packing)
    assert (r.padding, r.dp, r.slabs, r.length_histogram) == (ref.padding, ref.dp, ref.slabs, ref.length_histogram)

