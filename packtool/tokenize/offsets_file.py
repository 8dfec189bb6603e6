"""The flat store's row offsets, kept on disk while rows are appended (issue 23 class 8).

A tokenize run learns each row's length as its chunk is written, and `offsets.npy` (int64,
rows + 1) is the prefix sum of them all. Holding every length in memory until the end cost
8 bytes a row (plus a list entry per chunk): a peak that grew with the input. Here the lengths
go to a scratch file beside the store as they come, and `finish` writes `offsets.npy` from it
in blocks: the same bytes `np.save` writes, at a memory cost that does not depend on the rows.
"""
from __future__ import annotations

import os

import numpy as np

_BLOCK = 1 << 20  # lengths read back per step: 8 MiB in, 8 MiB out


class OffsetsFile:
    """Row lengths appended to `<directory>/.lengths.tmp`; `finish()` writes offsets.npy."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._scratch = os.path.join(directory, ".lengths.tmp")
        self._f = open(self._scratch, "wb")
        self.rows = 0

    def add(self, lengths: np.ndarray) -> None:
        a = np.ascontiguousarray(lengths, np.int64)
        self._f.write(memoryview(a).cast("B"))
        self.rows += a.size

    def finish(self, name: str = "offsets.npy") -> str:
        """Write `name` (offsets, int64, rows + 1 values, starting at 0) and drop the scratch
        file. The header is numpy's own, so the file is byte-identical to `np.save`'s."""
        self._f.close()
        path = os.path.join(self.directory, name)
        header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.int64)), "fortran_order": False,
                  "shape": (self.rows + 1,)}
        with open(self._scratch, "rb") as src, open(path, "wb") as out:
            np.lib.format.write_array_header_1_0(out, header)
            carry = np.zeros(1, np.int64)
            out.write(memoryview(carry).cast("B"))
            while True:
                block = np.fromfile(src, np.int64, _BLOCK)
                if not block.size:
                    break
                np.cumsum(block, out=block)
                block += carry[0]
                carry[0] = block[-1]
                out.write(memoryview(block).cast("B"))
        os.remove(self._scratch)
        return path

    def abort(self) -> None:
        """Close the scratch file; the caller removes the enclosing temporary directory."""
        self._f.close()
