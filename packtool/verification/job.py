"""`verify`, one shard worker's call: what it is asked (`ShardJob`: the shard or a run of its
row groups, the manifest's alignment, policy, tokenizer figures and side columns, the source)
and what it hands back (`ShardResult`: digest, size, rows, the `Tally`'s figures, problems).
Picklable: `run` sends these through its process pool.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from packtool.align import Alignment
from packtool.errors import spelling_now
from packtool.tokenize.checksum import SHARD_CHECKSUM
from packtool.verification.problems import ProblemLog


@dataclass(frozen=True)
class ShardJob:
    path: str
    name: str
    alignment: Alignment
    overflow_policy: str
    pad_id: int
    vocab_size: int | None
    source_dir: str | None = None  # FlatTokens directory of the tokenized source
    batch_rows: int = 128
    max_problems: int = 20
    row_groups: tuple[int, int] | None = None  # a piece of the shard; None: all of it
    row0: int = 0  # rows before the piece
    hash_file: bool = True  # one piece per shard hashes the whole file
    checksum: str = SHARD_CHECKSUM  # the algorithm the manifest used (older ones: sha256)
    side: tuple = ()  # the manifest's side columns (verification/side.py)
    source_side: tuple = ()  # the tokenized source's side columns (its store's order)
    side_source: tuple = ()  # per manifest side column, its index in source_side, -1: not compared
    max_token_id: int | None = None  # the manifest's record for this shard (absent in older outputs)
    # the caller's words for its arguments (errors.arg): a worker process names `directory` as the
    # command line does (DIR), not as the library does
    spelling: dict = field(default_factory=spelling_now)


@dataclass
class ShardResult:
    name: str
    digest: str  # of the job's `checksum` algorithm
    bytes: int
    rows: int = 0
    readable: bool = True
    totals: dict = field(default_factory=dict)  # physical/real/loss tokens, pads, slack
    slabs: dict = field(default_factory=dict)  # tally.SLAB_FIELDS -> array per row
    segments: dict = field(default_factory=dict)  # source, chunk, offset, length, row, seg
    nulls: dict = field(default_factory=dict)  # scalar column -> per row: null there (a `schema` problem)
    log: ProblemLog | None = None
    skipped: int = 0  # rows with inconsistent array lengths, whose segments and tokens are not counted
    top_id: int | None = None  # the largest token id read (pads too; None: no token), held to max_token_id
