"""Which rows run, in which chunks: active-row compaction and the logits-buffer size rule.

Rows with zero loss weight are dropped once, up front (one nonzero() sync), so every later step
(matmuls, row kernels, backward) scales with the active rows. Chunks of active rows are gathered
into a small [C, H] buffer (C x H x 2 bytes, a few MiB), never a copy of the whole hidden tensor;
when all rows are active the chunks are plain slices and nothing is copied.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch
from packtool.errors import PacktoolInputError

# Transient logits per chunk; with the two [C, H] buffers this keeps extra memory well under 512 MiB.
LOGITS_BUDGET_BYTES = 384 * 2**20
ROW_QUANTUM = 128  # matmul tile height: a chunk of 1000 rows would waste most of a last tile
MAX_CHUNK_ROWS = 8192


@dataclass(frozen=True)
class ActiveRows:
    index: torch.Tensor | None  # int64 [count] active row ids; None when every row is active
    count: int
    n_rows: int


@dataclass(frozen=True)
class Chunk:
    start: int  # position in the active-row order
    stop: int
    rows: torch.Tensor | None  # int64 row ids to gather/scatter; None: the slice [start, stop)


def find_active_rows(
    targets: torch.Tensor, loss_weights: torch.Tensor | None, vocab_size: int
) -> ActiveRows:
    """Compact the active rows and check their targets (the only host syncs of the fused path)."""
    n = targets.shape[0]
    if loss_weights is None:
        index, count = None, n
        active_targets = targets
    else:
        index = torch.nonzero(loss_weights != 0).squeeze(1)
        count = int(index.shape[0])
        if count == n:
            index = None
        active_targets = targets if index is None else targets.index_select(0, index)
    if count:
        bad = (active_targets < 0) | (active_targets >= vocab_size)
        if bool(bad.any()):
            pos = int(torch.nonzero(bad)[0, 0])
            row = pos if index is None else int(index[pos])
            raise PacktoolInputError(
                f"targets[{row}] = {int(targets[row])} is outside the vocabulary [0, {vocab_size}) "
                "on an active row; give that row loss weight 0 (e.g. prompt or pad tokens)"
            )
    return ActiveRows(index=index, count=count, n_rows=n)


def default_chunk_rows(hidden_size: int, vocab_local: int, itemsize: int) -> int:
    """Rows per chunk: as many as fit the logits budget, a multiple of the matmul tile.

    The hidden size does not bound the buffer (the [C, H] buffers are small next to [C, V]),
    but it sets how long each chunk's matmuls run; at H >= 1024 a 128-row multiple keeps them
    on full tiles.
    """
    rows = LOGITS_BUDGET_BYTES // max(1, vocab_local * itemsize)
    rows = (rows // ROW_QUANTUM) * ROW_QUANTUM
    return int(min(MAX_CHUNK_ROWS, max(ROW_QUANTUM, rows)))


def iter_chunks(active: ActiveRows, chunk_rows: int) -> Iterator[Chunk]:
    for start in range(0, active.count, chunk_rows):
        stop = min(start + chunk_rows, active.count)
        rows = None if active.index is None else active.index[start:stop]
        yield Chunk(start=start, stop=stop, rows=rows)


def take_rows(src: torch.Tensor, chunk: Chunk, buf: torch.Tensor | None) -> torch.Tensor:
    """src[rows of chunk]: a view when rows are contiguous, else gathered into buf."""
    if chunk.rows is None:
        return src[chunk.start : chunk.stop]
    if buf is None or src.dim() == 1:
        return src.index_select(0, chunk.rows)
    out = buf[: chunk.stop - chunk.start]
    torch.index_select(src, 0, chunk.rows, out=out)
    return out


def put_rows(dst: torch.Tensor, chunk: Chunk, values: torch.Tensor) -> None:
    if chunk.rows is None:
        dst[chunk.start : chunk.stop].copy_(values)
    else:
        dst.index_copy_(0, chunk.rows, values)
