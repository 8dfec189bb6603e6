"""Rows with cuts: pre-tokenized rows with loss masks packed under `--overflow split` or
`truncate`, and every place a user reads what the cuts took (the set-up that
tests/packing/test_split_targets.py and test_truncate_targets.py each kept a copy of, D1).
Each test module keeps its own rows and assertions; this builds and reads them."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.slabs.names import MANIFEST
from packtool.tokenize.flat_tokens import pack_tokens

runner = CliRunner()

# the planning paths: every row at once, spilled placements (the default), one plan shard a row
PATHS = {"global": ["--plan-shard-rows", "0"], "spilled": [], "shards": ["--plan-shard-rows", "1"]}
# where a user reads the figures: pack's --json (its `changes`, its `overflow`), the warning line,
# the manifest's stats (overflow, changes), inspect's table and its --json
PLACES = ["json_changes", "json_overflow", "warning", "manifest_overflow", "manifest_changes",
          "inspect_table", "inspect_json"]


@dataclass(frozen=True)
class CutRows:
    ids: list      # each row's token ids
    mask: list     # each row's loss mask
    capacity: int  # -C: rows longer are cut
    policy: str    # "split" or "truncate"
    kept: int      # the loss tokens the slabs keep (pack --json's loss_tokens)


@dataclass(frozen=True)
class Said:
    """What one place says: `figures` (the `overflow` or `changes` object: --json, manifest,
    inspect --json), or `text` (the warning line, inspect's table as one line); `record`: pack's
    whole --json object."""
    figures: dict | None = None
    text: str | None = None
    record: dict | None = None


def write_rows(tmp_path, rows: CutRows) -> str:
    p = str(tmp_path / "ov.parquet")
    pq.write_table(pa.table({"input_ids": pa.array(rows.ids, pa.list_(pa.int32())),
                             "loss_mask": pa.array(rows.mask, pa.list_(pa.int8()))}), p)
    return p


def pack_cut(tmp_path, rows: CutRows, path: str, *more):
    """`rows` packed under their policy on planning path `path`: (the CLI's result, the output)."""
    out = str(tmp_path / f"o_{path}")
    r = runner.invoke(app, ["pack", write_rows(tmp_path, rows), "-C", str(rows.capacity), "--overflow", rows.policy,
                            "-o", out, "--overwrite", "--no-progress", "--cache-dir", str(tmp_path / "cache"),
                            *PATHS[path], *more])
    assert r.exit_code == 0, r.stdout + r.stderr
    return r, out


def said(tmp_path, rows: CutRows, path: str, place: str) -> Said:
    """What `place` (one of PLACES) says of the cuts, `rows` packed on `path`."""
    if place in ("json_changes", "json_overflow"):
        r, _ = pack_cut(tmp_path, rows, path, "--json")
        d = json.loads(r.stdout)
        assert d["loss_tokens"] == rows.kept
        return Said(figures=d["changes" if place == "json_changes" else "overflow"], record=d)
    r, out = pack_cut(tmp_path, rows, path)
    if place == "warning":
        line = [ln for ln in r.stderr.splitlines() if ln.startswith("warning: ")]
        assert len(line) == 1, r.stderr
        return Said(text=line[0])
    if place in ("manifest_overflow", "manifest_changes"):
        st = json.load(open(os.path.join(out, MANIFEST)))["stats"]
        return Said(figures=st["changes" if place == "manifest_changes" else "overflow"])
    if place == "inspect_json":
        return Said(figures=json.loads(runner.invoke(app, ["inspect", out, "--json"]).stdout)["overflow"])
    text = " ".join(runner.invoke(app, ["inspect", out], env={"COLUMNS": "300"}).stdout.split())
    assert f"overflow ({rows.policy})" in text, text
    return Said(text=text)


def plan_lengths(tmp_path, lengths, capacity: int, policy: str):
    """`packtool plan` of the lengths alone: (its table as one line, its stderr)."""
    (tmp_path / "l.txt").write_text("".join(f"{n}\n" for n in lengths))
    r = runner.invoke(app, ["plan", "--lengths", str(tmp_path / "l.txt"), "-C", str(capacity), "--overflow", policy],
                      env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.stdout + r.stderr
    return " ".join(r.stdout.split()), r.stderr


def random_masks(seed: int, longest: int, rows: int = 200):
    """Random rows' loss masks for the count's reference: (masks, flat mask, offsets, the flat
    store's words of it). Dense, sparse and middling masks."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, longest, rows)
    masks = [(rng.random(n) < rng.choice([0.02, 0.3, 0.9])).astype(np.uint8) for n in lens]
    flat = np.concatenate(masks)
    offsets = np.concatenate(([0], np.cumsum(lens))).astype(np.int64)
    return masks, flat, offsets, pack_tokens(rng.integers(0, 50_000, flat.size), flat)
