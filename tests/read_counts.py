"""Row groups decoded per Parquet column, counted through every pyarrow entry point that decodes
pages: what the tests that hold a consumer to one read of each column count."""
from __future__ import annotations

import collections

import pyarrow.parquet as pq


def count_decodes(monkeypatch) -> collections.Counter:
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
