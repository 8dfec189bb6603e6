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
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.planning.cut_targets import count_rows
from packtool.slabs.names import MANIFEST
from packtool.tokenize.flat_tokens import pack_tokens

runner = CliRunner()
U = 8
# 20 tokens, every one a target: cuts at 8 and 16 lose 2; 5 tokens: no cut; 30 tokens, targets
# from 10 on: the cut at 8 (a prompt token) loses none, 16 and 24 lose 2; 17 tokens whose chunk
# starts (8, 16) are prompt tokens: 2 cuts, none lost
IDS = [list(range(1, 21)), list(range(1, 6)), list(range(1, 31)), list(range(1, 18))]
MASK = [[1] * 20, [0, 1, 1, 1, 1], [0] * 10 + [1] * 20, [0] + [1] * 7 + [0] + [1] * 7 + [0]]
CUTS, LOST = 7, 4
KEPT = sum(sum(m[1:]) for m in MASK) - LOST  # a row's first token is never a target either
PATHS = {"global": ["--plan-shard-rows", "0"], "spilled": [], "shards": ["--plan-shard-rows", "1"]}


def _data(tmp_path) -> str:
    p = str(tmp_path / "ov.parquet")
    pq.write_table(pa.table({"input_ids": pa.array(IDS, pa.list_(pa.int32())),
                             "loss_mask": pa.array(MASK, pa.list_(pa.int8()))}), p)
    return p


def _pack(tmp_path, path: str, *more):
    out = str(tmp_path / f"o_{path}")
    r = runner.invoke(app, ["pack", _data(tmp_path), "-C", str(U), "--overflow", "split", "-o", out,
                            "--overwrite", "--no-progress", "--cache-dir", str(tmp_path / "cache"),
                            *PATHS[path], *more])
    assert r.exit_code == 0, r.stdout + r.stderr
    return r, out


def _where(tmp_path, path: str, place: str) -> int:
    """The targets lost as `place` says them."""
    if place in ("json_changes", "json_overflow"):
        r, _ = _pack(tmp_path, path, "--json")
        d = json.loads(r.stdout)
        assert d["loss_tokens"] == KEPT and d["overflow"]["chunks"] == 3 + 4 + 3
        return d["changes" if place == "json_changes" else "overflow"]["targets_lost"]
    r, out = _pack(tmp_path, path)
    if place == "warning":
        line = [ln for ln in r.stderr.splitlines() if ln.startswith("warning: ")]
        assert len(line) == 1, r.stderr
        return int(line[0].split("chunks by --overflow split (")[1].split(" target(s) lost at the cuts")[0])
    if place in ("manifest_overflow", "manifest_changes"):
        st = json.load(open(os.path.join(out, MANIFEST)))["stats"]
        return st["changes" if place == "manifest_changes" else "overflow"]["targets_lost"]
    if place == "inspect_json":
        return json.loads(runner.invoke(app, ["inspect", out, "--json"]).stdout)["overflow"]["targets_lost"]
    text = " ".join(runner.invoke(app, ["inspect", out], env={"COLUMNS": "300"}).stdout.split())
    assert "overflow (split)" in text, text
    return int(text.split("targets lost ")[1].split()[0])


PLACES = ["json_changes", "json_overflow", "warning", "manifest_overflow", "manifest_changes",
          "inspect_table", "inspect_json"]


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("place", PLACES)
def test_split_says_the_targets_its_cuts_lost_everywhere(tmp_path, path, place):
    assert _where(tmp_path, path, place) == LOST


def test_verify_recounts_them_from_the_source_and_bounds_them_without(tmp_path):
    _, out = _pack(tmp_path, "spilled")
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
    (tmp_path / "l.txt").write_text("".join(f"{len(i)}\n" for i in IDS))
    r = runner.invoke(app, ["plan", "--lengths", str(tmp_path / "l.txt"), "-C", str(U), "--overflow", "split"],
                      env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.stdout + r.stderr
    assert "targets lost ? (lengths only)" in " ".join(r.stdout.split()), r.stdout
    assert "targets lost at the cuts not counted (lengths only)" in r.stderr, r.stderr


@pytest.mark.parametrize("usable", [1, 2, 7, 16])
def test_the_count_on_masks_and_on_flat_words_is_the_reference(usable):
    rng = np.random.default_rng(usable)
    lens = rng.integers(1, 60, 200)
    masks = [(rng.random(n) < rng.choice([0.02, 0.3, 0.9])).astype(np.uint8) for n in lens]
    flat = np.concatenate(masks)
    offsets = np.concatenate(([0], np.cumsum(lens))).astype(np.int64)
    over = np.flatnonzero(lens > usable)
    want = sum(int(m[k]) for m in masks for k in range(usable, len(m), usable))
    words = pack_tokens(rng.integers(0, 50_000, flat.size), flat)
    for flags, shift in ((flat, 0), (words, 31)):
        got = count_rows(flags, offsets, over, usable, shift, split=True)
        assert (got.targets, got.untrained, got.first_untrained) == (want, 0, -1)
