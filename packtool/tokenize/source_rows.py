"""Where a row of a tokenized cache came from: its input file and its row in that file.

A cache row (a slab segment's `source_index`) counts across every input in the order given,
and skips rows `--on-empty skip` dropped; a user looks for "m2.parquet row 0", not "source
row 3". The cache's `source_index` column gives the global input row, cache.json's `inputs`
how many rows each file held: together they name the file and its row (0-based, as the
tokenizer's errors count). One rule for pack's planner errors and verify's source messages.
"""
from __future__ import annotations

import functools
import os

import numpy as np


class SourceRows:
    """Names cache rows as (input file, row in it). Reads the cache's `source_index` column on
    first use only: a run that names no row pays nothing."""

    def __init__(self, cache) -> None:
        self._cache = cache
        self._global: np.ndarray | None = None
        counts = [d.get("rows") for d in cache.meta.get("inputs", [])]
        self._known = bool(counts) and all(isinstance(c, int) for c in counts)
        self._starts = np.concatenate(([0], np.cumsum(counts))) if self._known else np.zeros(1, np.int64)
        self._paths = [f.path for f in cache.input_files]

    def locate(self, row: int) -> tuple[str | None, int]:
        """(input file, row in it) of cache row `row`; (None, global row) for a cache that
        records no per-input counts (an older one), or a row outside the cache."""
        if self._global is None:
            self._global = self._cache.source_indices()
        if not 0 <= row < self._global.size:
            return None, int(row)
        g = int(self._global[row])
        if not self._known:
            return None, g
        f = int(np.searchsorted(self._starts, g, side="right")) - 1
        return self._paths[f], g - int(self._starts[f])

    def describe(self, row: int) -> tuple[str, dict]:
        """`source FILE row R, source_index I`, the words every source message uses, and the
        same as fields (verify's --json: `source_file`, `source_row`)."""
        path, r = self.locate(row)
        if path is None:
            return f"source row {int(row)}", {}
        return f"source {path} row {r}, source_index {int(row)}", {"source_file": path, "source_row": r}


def describe_row(rows: SourceRows | None, row: int) -> tuple[str, dict]:
    """`rows.describe(row)`, or the global row alone where no source cache is at hand."""
    return rows.describe(row) if rows is not None else (f"source row {int(row)}", {})


@functools.lru_cache(maxsize=4)
def source_rows_at(store: str) -> SourceRows | None:
    """The namer of the cache a flat store (verify's source) sits in, once per process:
    verify's workers name rows of the same source many times. None for a store that is not
    in a cache (a library caller's own): its rows are named by their global number."""
    from packtool.errors import PacktoolError
    from packtool.tokenize.cache import TokenizedCache
    for root in (os.path.normpath(store), os.path.dirname(os.path.normpath(store))):
        if os.path.exists(os.path.join(root, "cache.json")):
            try:
                return SourceRows(TokenizedCache(root))
            except PacktoolError:  # unreadable: the comparison says what it can without names
                return None
    return None


__all__ = ["SourceRows", "describe_row", "source_rows_at"]
