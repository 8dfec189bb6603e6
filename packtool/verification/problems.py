"""What `verify` found: one record per broken invariant, with where and expected vs found."""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

import numpy as np


@dataclass(frozen=True)
class Problem:
    check: str  # short name of the invariant (see docs/INSPECT.md, "verify checks")
    message: str  # one line that names what broke
    shard: str | None = None
    row: int | None = None  # row inside the shard
    segment: int | None = None  # segment inside the slab
    expected: object = None
    found: object = None
    source_file: str | None = None  # with --source: the input file of the segment's row
    source_row: int | None = None  # ... and its row there (0-based)

    def location(self) -> str:
        parts = [p for p in (self.shard, None if self.row is None else f"row {self.row}",
                             None if self.segment is None else f"segment {self.segment}") if p]
        return " ".join(parts) or "output"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class ProblemLog:
    """Keeps the first `limit` problems of each check and counts every one, so a badly broken
    output gives a readable list rather than millions of lines."""

    limit: int = 20
    problems: list[Problem] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)

    def add(self, check: str, message: str, **where) -> None:
        self.counts[check] += 1
        if self.counts[check] <= self.limit:
            self.problems.append(Problem(check, message, **where))

    def merge(self, other: "ProblemLog") -> None:
        for p in other.problems:
            if self.counts[p.check] < self.limit:
                self.problems.append(p)
            self.counts[p.check] += 1
        for k, v in other.counts.items():
            kept = sum(1 for p in other.problems if p.check == k)
            self.counts[k] += v - kept

    def __bool__(self) -> bool:
        return bool(self.counts)


def first_of(rows: np.ndarray) -> np.ndarray:
    """Indices of the first entry of every distinct value in a sorted int array."""
    return np.flatnonzero(np.concatenate(([True], rows[1:] != rows[:-1]))) if rows.size else rows


def segment_problems(log, check, wrong, seg_row, seg_in_row, row0, where, msg, expected=None, found=None):
    idx = np.flatnonzero(wrong)
    if not idx.size:
        return
    # one entry per row (its first bad segment) keeps the list readable
    for i in idx[first_of(seg_row[idx])]:
        log.add(check, msg(i), row=row0 + int(seg_row[i]), segment=int(seg_in_row[i]),
                expected=None if expected is None else int(expected[i]),
                found=None if found is None else int(found[i]), **where)
