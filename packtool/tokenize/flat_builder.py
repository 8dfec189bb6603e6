"""The flat token store written while its rows are tokenized (`FlatTokensBuilder`).

`tokenize_to_cache` feeds it the arrays it writes to the cache's Parquet parts, so the first
pack opens the store instead of rebuilding it from the cache (tokenize/flat_tokens.py, which
owns the store's format and its rebuild), and the checksums cache.json records are hashed as
the bytes go out, without a re-read.
"""
from __future__ import annotations

import os

import numpy as np

from packtool.tokenize.cache import FLAT_DIR, file_record, side_files
from packtool.tokenize.flat_tokens import TOKENS_FILE, pack_tokens
from packtool.tokenize.offsets_file import OffsetsFile
from packtool.tokenize.side_store import SparseRowsWriter, write_hashed


class FlatTokensBuilder:
    """Writes a flat store while its rows are produced: `tokenize_to_cache` feeds it the same
    arrays it writes to the cache parts, so the first pack opens the store instead of
    re-reading the Parquet cache. Rows must be added in cache row order. The store is meant
    to live inside a directory that is published by one rename (the cache's temporary
    directory), so files are written in place; offsets.npy is written last, by close()."""

    def __init__(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        import xxhash
        self.directory = directory
        self._tokens = open(os.path.join(directory, TOKENS_FILE), "wb", buffering=0)
        self._offsets = OffsetsFile(directory)  # lengths on disk as they come: no per-row memory
        self._hash = xxhash.xxh3_128()  # the checksum cache.json records, without a re-read
        self._side: list = []  # per side column: [file, hash] (width 1) or a SparseRowsWriter
        self._xxh3 = xxhash.xxh3_128

    def add(self, ids: np.ndarray, mask: np.ndarray | None, lengths: np.ndarray, sides=None,
            side_cols=()) -> None:
        """Append rows: `ids` (int32) and `mask` (uint8; None: every token is a target) are
        the rows concatenated, `lengths` their token counts; `sides` the values of the side
        columns `side_cols` for the same tokens (width per token, flat)."""
        lengths = np.asarray(lengths, np.int64)
        if (mask is not None and np.size(ids) != np.size(mask)) or np.size(ids) != int(lengths.sum()):
            raise ValueError(f"flat store rows disagree: {np.size(ids)} ids, {np.size(mask)} mask "
                             f"values, lengths sum to {int(lengths.sum())}")
        write_hashed(self._tokens, self._hash, pack_tokens(ids, mask))
        for k, values in enumerate(sides or ()):
            if k == len(self._side):
                self._open_side(k, side_cols[k])
            if isinstance(self._side[k], SparseRowsWriter):
                self._side[k].add(values)
            else:
                write_hashed(*self._side[k], values)
        self._offsets.add(lengths)

    def _open_side(self, k: int, c) -> None:
        paths = [os.path.join(self.directory, n) for n in side_files(k, c.width)]
        if c.width > 1:
            self._side.append(SparseRowsWriter(paths, c, self._xxh3))
        else:
            self._side.append([open(paths[0], "wb", buffering=0), self._xxh3()])

    def close(self, side=()) -> dict:
        """Finish the store; returns cache.json's records of its files (the files of the side
        columns `side`, in order, included)."""
        self._tokens.close()
        recs = {}
        for k, c in enumerate(side):
            if k == len(self._side):  # no rows were added: empty files
                self._open_side(k, c)
            w = self._side[k]
            if isinstance(w, SparseRowsWriter):
                pairs = zip(w.paths, w.close())
            else:
                w[0].close()
                pairs = [(w[0].name, w[1].hexdigest())]
            for path, digest in pairs:
                recs[f"{FLAT_DIR}/{os.path.basename(path)}"] = file_record(path, digest)
        self._offsets.finish("offsets.npy")
        return {f"{FLAT_DIR}/{TOKENS_FILE}": file_record(os.path.join(self.directory, TOKENS_FILE),
                                                         self._hash.hexdigest()),
                f"{FLAT_DIR}/offsets.npy": file_record(os.path.join(self.directory, "offsets.npy")), **recs}

    def abort(self) -> None:
        """Close the files; the caller removes the enclosing temporary directory."""
        self._tokens.close()
        self._offsets.abort()
        for w in self._side:
            if isinstance(w, SparseRowsWriter):
                w.abort()
            else:
                w[0].close()

