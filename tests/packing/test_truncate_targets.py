"""S44-3: `--overflow truncate` counts the targets (loss tokens) it cuts away and the sequences it
leaves with none, wherever a user looks (--json's `changes` and `overflow`, the warning line, the
manifest's stats.overflow and stats.changes, `inspect` and its --json), under every planning path
(global, spilled, many plan shards); `verify --source` recounts them from the source; a plan of
lengths alone says them unknown, never 0. The count itself (planning.cut_targets) is held to a
plain reference on both of its inputs (a 0/1 mask, the flat store's words)."""
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
# 20 tokens with targets on the last 5 (all past U=12: the row keeps none), 5 tokens, 30 tokens
# with targets on the first 10 (none cut: position 0 is never a target in a slab)
IDS = [list(range(1, 21)), list(range(1, 6)), list(range(1, 31))]
MASK = [[0] * 15 + [1] * 5, [0, 1, 1, 1, 1], [1] * 10 + [0] * 20]
CUT, UNTRAINED, KEPT = 5, 1, 13
ROWS = CutRows(IDS, MASK, 12, "truncate", KEPT)


def _where(tmp_path, path: str, place: str) -> tuple[int, int]:
    """(targets cut, sequences left with none) as `place` says them."""
    got = said(tmp_path, ROWS, path, place)
    if got.figures is not None:  # `changes` names the second figure sequences_untrained
        return got.figures["targets_lost"], got.figures["sequences_untrained" if place.endswith("changes") else "untrained"]
    if place == "warning":
        line = got.text
        assert "ov.parquet row 0" in line, line
        cut = int(line.split(", ")[1].split(" of them target")[0])
        return cut, int(line.split("; ")[1].split(" of those sequence")[0])
    text = got.text
    return (int(text.split("targets lost ")[1].split()[0]), int(text.split("untrained ")[1].split()[0]))


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("place", PLACES)
def test_truncate_says_the_targets_it_cut_everywhere(tmp_path, path, place):
    assert _where(tmp_path, path, place) == (CUT, UNTRAINED)


def test_verify_source_recounts_them_and_an_older_output_still_reads(tmp_path):
    _, out = pack_cut(tmp_path, ROWS, "spilled")
    src = str(tmp_path / "ov.parquet")
    cache = ["--cache-dir", str(tmp_path / "cache")]
    assert runner.invoke(app, ["verify", out, "--source", src, *cache]).exit_code == 0
    man = os.path.join(out, MANIFEST)
    good = json.load(open(man))
    for key in ("targets_lost", "untrained"):
        m = json.loads(json.dumps(good))
        m["stats"]["overflow"][key] = 0
        m["stats"]["changes"][{"untrained": "sequences_untrained"}.get(key, key)] = 0
        json.dump(m, open(man, "w"))
        r = runner.invoke(app, ["verify", out, "--source", src, *cache])
        assert r.exit_code == 1 and f"stats.overflow.{key} is 0, the source gives" in r.stdout, r.stdout
    # an output of an older packtool has no `untrained`: read as before, by verify and inspect
    m = json.loads(json.dumps(good))
    del m["stats"]["overflow"]["untrained"], m["stats"]["changes"]["sequences_untrained"]
    json.dump(m, open(man, "w"))
    assert runner.invoke(app, ["verify", out]).exit_code == 0
    assert runner.invoke(app, ["inspect", out]).exit_code == 0


def test_a_plan_of_lengths_says_the_targets_unknown(tmp_path):
    table, stderr = plan_lengths(tmp_path, map(len, IDS), 12, "truncate")
    assert "targets lost ? (lengths only)" in table, table
    assert "targets among them not counted (lengths only)" in stderr, stderr


def _reference(ids_mask, usable):
    cut = untrained = 0
    first = -1
    for r, m in enumerate(ids_mask):
        if len(m) <= usable:
            continue
        c, k = sum(int(x) for x in m[usable:]), sum(int(x) for x in m[1:usable])
        cut += c
        if c and not k:
            untrained += 1
            first = r if first < 0 else first
    return cut, untrained, first


@pytest.mark.parametrize("usable", [1, 2, 7, 16])
def test_the_count_on_masks_and_on_flat_words_is_the_reference(usable):
    masks, flat, offsets, words = random_masks(usable, 30)
    lens = np.diff(offsets)
    over = np.flatnonzero(lens > usable)
    want = _reference([list(m) for m in masks], usable)
    for flags, shift in ((flat, 0), (words, 31)):
        got = count_rows(flags, offsets, over, usable, shift)
        assert (got.targets, got.untrained, got.first_untrained) == want
