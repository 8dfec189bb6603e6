"""L6: `--overflow split` counted `targets_lost` as one per cut, whatever the token at the cut: a
cut inside a prompt (no target there) was said to lose one. FORMAT.md's meaning is the targets
lost at the cuts: a chunk's first token is never a target in a slab, so what a split loses is
the targets among its chunks' first tokens. Counted from the loss masks, as truncate's are,
wherever a user looks (--json's `changes` and `overflow`, the warning line, the manifest's
stats, `inspect` and its --json), under every planning path; `verify --source` recounts them;
`verify` without the source holds them to the cuts; a plan of lengths says them unknown."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from cut_support import PATHS, PLACES, CutRows, pack_cut, plan_lengths, random_masks, said
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.planning.cut_targets import count_rows
from packtool.slabs.names import MANIFEST

runner = CliRunner()
U = 8
# 20 tokens, every one a target: cuts at 8 and 16 lose 2; 5 tokens: no cut; 30 tokens, targets
# from 10 on: the cut at 8 (a prompt token) loses none, 16 and 24 lose 2; 17 tokens whose chunk
# starts (8, 16) are prompt tokens: 2 cuts, none lost
IDS = [list(range(1, 21)), list(range(1, 6)), list(range(1, 31)), list(range(1, 18))]
MASK = [[1] * 20, [0, 1, 1, 1, 1], [0] * 10 + [1] * 20, [0] + [1] * 7 + [0] + [1] * 7 + [0]]
CUTS, LOST = 7, 4
KEPT = sum(sum(m[1:]) for m in MASK) - LOST  # a row's first token is never a target either
ROWS = CutRows(IDS, MASK, U, "split", KEPT)


def _where(tmp_path, path: str, place: str) -> int:
    """The targets lost as `place` says them."""
    got = said(tmp_path, ROWS, path, place)
    if got.record is not None:
        assert got.record["overflow"]["chunks"] == 3 + 4 + 3
    if got.figures is not None:
        return got.figures["targets_lost"]
    if place == "warning":
        return int(got.text.split("chunks by --overflow split (")[1].split(" target(s) lost at the cuts")[0])
    return int(got.text.split("targets lost ")[1].split()[0])


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("place", PLACES)
def test_split_says_the_targets_its_cuts_lost_everywhere(tmp_path, path, place):
    assert _where(tmp_path, path, place) == LOST


def test_verify_recounts_them_from_the_source_and_bounds_them_without(tmp_path):
    _, out = pack_cut(tmp_path, ROWS, "spilled")
    src = str(tmp_path / "ov.parquet")
    cache = ["--cache-dir", str(tmp_path / "cache")]
    assert runner.invoke(app, ["verify", out, "--source", src, *cache]).exit_code == 0
    assert runner.invoke(app, ["verify", out]).exit_code == 0
    man = os.path.join(out, MANIFEST)
    good = json.load(open(man))

    def edited(value: int) -> None:
        m = json.loads(json.dumps(good))
        m["stats"]["overflow"]["targets_lost"] = m["stats"]["changes"]["targets_lost"] = value
        json.dump(m, open(man, "w"))
    edited(CUTS)  # the old count: one per cut
    r = runner.invoke(app, ["verify", out, "--source", src, *cache])
    assert r.exit_code == 1 and f"stats.overflow.targets_lost is {CUTS}, the source gives {LOST}" in r.stdout, r.stdout
    assert runner.invoke(app, ["verify", out]).exit_code == 0  # without the source: within the cuts
    edited(CUTS + 1)  # more than the cuts can lose: the slabs alone tell
    r = runner.invoke(app, ["verify", out])
    assert r.exit_code == 1 and f"stats.overflow.targets_lost is {CUTS + 1}, more than the shards' {CUTS}" in r.stdout
    r = runner.invoke(app, ["inspect", out])
    assert r.exit_code == 2 and f"more than the slabs' {CUTS} cut(s)" in r.stderr, r.stdout + r.stderr


def test_a_plan_of_lengths_says_the_targets_unknown(tmp_path):
    table, stderr = plan_lengths(tmp_path, map(len, IDS), U, "split")
    assert "targets lost ? (lengths only)" in table, table
    assert "targets lost at the cuts not counted (lengths only)" in stderr, stderr


@pytest.mark.parametrize("usable", [1, 2, 7, 16])
def test_the_count_on_masks_and_on_flat_words_is_the_reference(usable):
    masks, flat, offsets, words = random_masks(usable, 60)
    lens = np.diff(offsets)
    over = np.flatnonzero(lens > usable)
    want = sum(int(m[k]) for m in masks for k in range(usable, len(m), usable))
    for flags, shift in ((flat, 0), (words, 31)):
        got = count_rows(flags, offsets, over, usable, shift, split=True)
        assert (got.targets, got.untrained, got.first_untrained) == (want, 0, -1)
