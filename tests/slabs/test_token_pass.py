"""The readers' per-token check (`slabs.token_pass._token_pass`, vectorized numpy) names the same
first broken rule as a plain scan row by row, segment by segment, position by position (the
order of the numba kernel it replaced): the first of every kind of damage, one to three at
once, anywhere in a group whose values may start past 0 (a sliced column). And reading an
output, checks included, loads neither numba nor the tokenizers library (their start was most
of the checks' cost, BENCHMARKS.md "Consumer checks")."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from slab_support import write_pack

from packtool.align import Alignment

from packtool.slabs.token_pass import BAD, _runs, _token_pass

PAD, VOCAB = 7, 50


def scan(ids, mask, id_off, seg_row, seg_start, seq_lens, padded, pad_id, vocab, n_loss):
    """The reference: the kernel's loop, in Python."""
    top = vocab if vocab > 0 else 2**31  # FORMAT.md: ids below 2^31 without a vocabulary
    for r in range(id_off.size - 1):
        total = 0
        for k in np.flatnonzero(seg_row == r):
            start, mid, end = seg_start[k], seg_start[k] + seq_lens[k], seg_start[k] + padded[k]
            if mid > start and mask[start] != 0:
                return 2, r, start - id_off[r]
            for p in range(start, mid):
                total += mask[p]
                if mask[p] > 1:
                    return 3, r, p - id_off[r]
                if ids[p] < 0 or ids[p] >= top:
                    return 4, r, p - id_off[r]
            for p in range(mid, end):
                if ids[p] != pad_id:
                    return 0, r, p - id_off[r]
                if mask[p] != 0:
                    return 1, r, p - id_off[r]
        if total != n_loss[r]:
            return 5, r, -1
    return None


def group(rng, prefix):
    """A clean group: rows of segments (some fill segments of length 0), values after `prefix`
    tokens that belong to no row."""
    n_rows = int(rng.integers(1, 6))
    nseg = rng.integers(1, 4, n_rows)
    lens = rng.integers(0, 6, nseg.sum())
    lens[np.cumsum(nseg) - nseg] = rng.integers(1, 6, n_rows)  # every row has a real segment
    padded = lens + rng.integers(0, 4, lens.size)
    padded[padded == 0] = 2
    seg_row = np.repeat(np.arange(n_rows), nseg)
    T = np.bincount(seg_row, weights=padded, minlength=n_rows).astype(np.int64)
    id_off = prefix + np.concatenate(([0], np.cumsum(T)))
    seg_start = prefix + np.concatenate(([0], np.cumsum(padded)[:-1]))
    n = int(id_off[-1])
    ids = np.full(n, PAD, np.int32)
    mask = np.zeros(n, np.uint8)
    ids[:prefix] = rng.integers(-5, 2 * VOCAB, prefix)  # not this group's: never judged
    mask[:prefix] = rng.integers(0, 3, prefix)
    for s, L in zip(seg_start, lens):
        ids[s:s + L] = rng.integers(0, VOCAB, L)
        mask[s + 1:s + L] = rng.integers(0, 2, max(L - 1, 0))
    n_loss = np.bincount(seg_row, weights=[mask[s:s + L].sum() for s, L in zip(seg_start, lens)],
                         minlength=n_rows).astype(np.int64)
    return ids, mask, id_off, seg_row, seg_start, lens.astype(np.int64), padded.astype(np.int64), n_loss


def damage(rng, ids, mask, seg_start, lens, padded, n_loss):
    kind = int(rng.integers(0, 6))
    k = int(rng.integers(0, lens.size))
    s, L, P = seg_start[k], lens[k], padded[k]
    if kind == 0 and P > L:
        ids[s + int(rng.integers(L, P))] = PAD + 1
    elif kind == 1 and P > L:
        mask[s + int(rng.integers(L, P))] = 1
    elif kind == 2 and L:
        mask[s] = 1
    elif kind == 3 and L:
        mask[s + int(rng.integers(0, L))] = 2
    elif kind == 4 and L:
        ids[s + int(rng.integers(0, L))] = rng.choice([-1, VOCAB, 2**31 - 1])
    elif kind == 5:
        n_loss[int(rng.integers(0, n_loss.size))] += 1


@pytest.mark.parametrize("seed", range(4))
def test_the_first_broken_rule_is_the_scans(seed):
    rng = np.random.default_rng(seed)
    seen = set()
    for case in range(300):
        ids, mask, id_off, seg_row, seg_start, lens, padded, n_loss = group(rng, int(rng.integers(0, 3)))
        assert _token_pass(ids, mask, id_off, seg_start, lens, padded, PAD, VOCAB, n_loss) is None
        for _ in range(int(rng.integers(1, 4)) if case % 5 else 0):
            damage(rng, ids, mask, seg_start, lens, padded, n_loss)
        want = scan(ids, mask, id_off, seg_row, seg_start, lens, padded, PAD, VOCAB, n_loss)
        got = _token_pass(ids, mask, id_off, seg_start, lens, padded, PAD, VOCAB, n_loss)
        assert got == want, (case, BAD[want[0]] if want else None)
        seen.add(None if want is None else want[0])
    assert seen == {None, 0, 1, 2, 3, 4, 5}


def test_a_pad_id_outside_the_vocabulary_is_not_a_damage():
    """The whole-group test fails on such pads; the search then finds nothing."""
    rng = np.random.default_rng(1)
    ids, mask, id_off, seg_row, seg_start, lens, padded, n_loss = group(rng, 0)
    ids[_runs(seg_start + lens, padded - lens)] = VOCAB + 3
    assert _token_pass(ids, mask, id_off, seg_start, lens, padded, VOCAB + 3, VOCAB, n_loss) is None


READ = """
import json, sys
from packtool.slabs.format import SlabManifest
from packtool.slabs.reader import SlabIndex, SlabReader
man = SlabManifest.read(sys.argv[1])
index = SlabIndex.build(man)
reader = SlabReader(man, index)
tokens = sum(int(reader.row(i).input_ids.size) for i in range(len(index)))
print(json.dumps({"tokens": tokens, "loaded": [m for m in ("numba", "tokenizers", "torch") if m in sys.modules]}))
"""


def test_reading_an_output_loads_no_numba(tmp_path):
    out, _ = write_pack(str(tmp_path), np.random.default_rng(2).integers(2, 60, 200), Alignment(capacity=128),
                        shard_tokens=2048, group_tokens=128)
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    r = subprocess.run([sys.executable, "-c", READ, out], capture_output=True, text=True, cwd=root,
                       env=dict(os.environ, PYTHONPATH=root), timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["tokens"] > 0 and got["loaded"] == [], got
