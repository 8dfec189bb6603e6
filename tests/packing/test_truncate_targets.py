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
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.planning.cut_targets import count_rows
from packtool.slabs.names import MANIFEST
from packtool.tokenize.flat_tokens import pack_tokens

runner = CliRunner()
# 20 tokens with targets on the last 5 (all past U=12: the row keeps none), 5 tokens, 30 tokens
# with targets on the first 10 (none cut: position 0 is never a target in a slab)
IDS = [list(range(1, 21)), list(range(1, 6)), list(range(1, 31))]
MASK = [[0] * 15 + [1] * 5, [0, 1, 1, 1, 1], [1] * 10 + [0] * 20]
CUT, UNTRAINED, KEPT = 5, 1, 13
PATHS = {"global": ["--plan-shard-rows", "0"], "spilled": [], "shards": ["--plan-shard-rows", "1"]}


def _data(tmp_path) -> str:
    p = str(tmp_path / "ov.parquet")
    pq.write_table(pa.table({"input_ids": pa.array(IDS, pa.list_(pa.int32())),
                             "loss_mask": pa.array(MASK, pa.list_(pa.int8()))}), p)
    return p


def _pack(tmp_path, path: str, *more):
    out = str(tmp_path / f"o_{path}")
    r = runner.invoke(app, ["pack", _data(tmp_path), "-C", "12", "--overflow", "truncate", "-o", out,
                            "--overwrite", "--no-progress", "--cache-dir", str(tmp_path / "cache"),
                            *PATHS[path], *more])
    assert r.exit_code == 0, r.stdout + r.stderr
    return r, out


def _where(tmp_path, path: str, place: str) -> tuple[int, int]:
    """(targets cut, sequences left with none) as `place` says them."""
    if place in ("json_changes", "json_overflow"):
        r, _ = _pack(tmp_path, path, "--json")
        d = json.loads(r.stdout)
        assert d["loss_tokens"] == KEPT
        if place == "json_changes":
            return d["changes"]["targets_lost"], d["changes"]["sequences_untrained"]
        return d["overflow"]["targets_lost"], d["overflow"]["untrained"]
    r, out = _pack(tmp_path, path)
    if place == "warning":
        line = [ln for ln in r.stderr.splitlines() if ln.startswith("warning: ")]
        assert len(line) == 1 and "ov.parquet row 0" in line[0], r.stderr
        cut = int(line[0].split(", ")[1].split(" of them target")[0])
        return cut, int(line[0].split("; ")[1].split(" of those sequence")[0])
    if place in ("manifest_overflow", "manifest_changes"):
        st = json.load(open(os.path.join(out, MANIFEST)))["stats"]
        if place == "manifest_changes":
            return st["changes"]["targets_lost"], st["changes"]["sequences_untrained"]
        return st["overflow"]["targets_lost"], st["overflow"]["untrained"]
    if place == "inspect_json":
        o = json.loads(runner.invoke(app, ["inspect", out, "--json"]).stdout)["overflow"]
        return o["targets_lost"], o["untrained"]
    text = " ".join(runner.invoke(app, ["inspect", out], env={"COLUMNS": "300"}).stdout.split())
    assert "overflow (truncate)" in text, text
    return (int(text.split("targets lost ")[1].split()[0]), int(text.split("untrained ")[1].split()[0]))


PLACES = ["json_changes", "json_overflow", "warning", "manifest_overflow", "manifest_changes",
          "inspect_table", "inspect_json"]


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("place", PLACES)
def test_truncate_says_the_targets_it_cut_everywhere(tmp_path, path, place):
    assert _where(tmp_path, path, place) == (CUT, UNTRAINED)


def test_verify_source_recounts_them_and_an_older_output_still_reads(tmp_path):
    _, out = _pack(tmp_path, "spilled")
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
    (tmp_path / "l.txt").write_text("20\n5\n30\n")
    r = runner.invoke(app, ["plan", "--lengths", str(tmp_path / "l.txt"), "-C", "12", "--overflow", "truncate"],
                      env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.stdout + r.stderr
    assert "targets lost ? (lengths only)" in " ".join(r.stdout.split()), r.stdout
    assert "targets among them not counted (lengths only)" in r.stderr, r.stderr


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
    rng = np.random.default_rng(usable)
    lens = rng.integers(1, 30, 200)
    masks = [(rng.random(n) < rng.choice([0.02, 0.3, 0.9])).astype(np.uint8) for n in lens]
    flat = np.concatenate(masks)
    offsets = np.concatenate(([0], np.cumsum(lens))).astype(np.int64)
    over = np.flatnonzero(lens > usable)
    want = _reference([list(m) for m in masks], usable)
    words = pack_tokens(rng.integers(0, 50_000, flat.size), flat)
    for flags, shift in ((flat, 0), (words, 31)):
        got = count_rows(flags, offsets, over, usable, shift)
        assert (got.targets, got.untrained, got.first_untrained) == want
