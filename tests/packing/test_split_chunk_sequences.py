"""S47B-5: under `--overflow split` a long row's chunks are segments of their own, and a
per-sequence loss (GRPO's seq-mean-token-mean, Dr. GRPO's seq-mean-token-sum; RL.md) counts each
chunk as a sequence: a split rollout's advantage weighed once per chunk, its objective another
than the rollouts' alone (-0.294 against -0.198 in the report), and pack said only how many were
split. Wherever pack or plan says a split (its warning line on every planning path, a plan
of lengths), it now says that a per-sequence loss counts each chunk as a
sequence, and how to keep a row one sequence."""
from __future__ import annotations

import pytest
from cut_support import PATHS, CutRows, pack_cut, plan_lengths

IDS = [list(range(1, 21)), list(range(1, 6))]
ROWS = CutRows(IDS, [[1] * 20, [0, 1, 1, 1, 1]], 8, "split", 0)
SAID = "a per-sequence loss (GRPO's seq-mean-token-mean) counts each chunk as a sequence"


def _fix_said(line: str, flag: bool = True) -> None:
    assert SAID in line, line
    assert ("--overflow error" in line and "--max-tokens" in line) if flag else True, line


@pytest.mark.parametrize("path", sorted(PATHS))
def test_packs_split_warning_says_a_chunk_is_a_sequence_to_a_per_sequence_loss(tmp_path, path):
    r, _ = pack_cut(tmp_path, ROWS, path)
    (line,) = [ln for ln in r.stderr.splitlines() if ln.startswith("warning: ") and "split into" in ln]
    _fix_said(line)


def test_a_plan_of_lengths_says_it_too(tmp_path):
    _, stderr = plan_lengths(tmp_path, map(len, IDS), 8, "split")
    _fix_said(" ".join(stderr.split()))


def test_a_pack_without_a_split_says_nothing_of_it(tmp_path):
    r, _ = pack_cut(tmp_path, CutRows([list(range(1, 6))], [[0, 1, 1, 1, 1]], 8, "split", 0), "spilled")
    assert SAID not in r.stderr
