"""L6: `plan --lengths` did not count a sequence of one token, which trains nothing in a slab (its
only token is a sequence's first, never a target), where pack counts such a row in
changes.sequences_one_token and sequences_untrained and says it in its warning (7509ff0, S45A-7):
a plan made to preview a pack said `sequences_untrained 0` and no warning for rows its pack then
warned of. Held over every lengths file kind (the row named is the file's) and every overflow
policy, in --json's `changes` and the summary's warning line, and against pack's own `changes`
for the same rows."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from packtool.cli.app import app

runner = CliRunner()
LENGTHS = [5, 1, 30, 1, 12]  # rows 1 and 3 are of one token
FIRST = 1


def _write(tmp_path, fmt: str, lengths=LENGTHS) -> str:
    path = str(tmp_path / f"lengths.{fmt}")
    if fmt == "txt":
        open(path, "w").write("".join(f"{n}\n" for n in lengths))
    elif fmt == "npy":
        np.save(path, np.asarray(lengths, np.int64))
    elif fmt == "jsonl":
        open(path, "w").write("".join(json.dumps({"length": n}) + "\n" for n in lengths))
    elif fmt == "csv":
        open(path, "w").write("length\n" + "".join(f"{n}\n" for n in lengths))
    else:
        pq.write_table(pa.table({"length": pa.array(lengths, pa.int64())}), path)
    return path


FORMATS = ["txt", "npy", "jsonl", "csv", "parquet"]
# policy -> its flags (error: a capacity every row fits, the others cut the row of 30)
POLICIES = {"error": ["-C", "64"], "truncate": ["-C", "16", "--overflow", "truncate"],
            "split": ["-C", "16", "--overflow", "split"], "singleton": ["-C", "16", "--overflow", "singleton"]}


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_plan_counts_rows_of_one_token_in_its_json(tmp_path, fmt, policy):
    r = runner.invoke(app, ["--json", "plan", "--lengths", _write(tmp_path, fmt), *POLICIES[policy]])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    ch = d["changes"]
    # truncate's rows cut to no target are the masks' to say: unknown to a plan of lengths, so
    # the total is null (tests/planning/test_plan_json_unknown.py); the one-token rows stay counted
    untrained = None if policy == "truncate" else 2
    assert (ch["sequences_one_token"], ch["sequences_untrained"]) == (2, untrained), ch
    assert d["one_token_rows"] == 2 and d["first_one_token"].endswith(f"lengths.{fmt} row {FIRST}"), d


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_plans_summary_warns_of_rows_of_one_token_naming_the_first(tmp_path, fmt, policy):
    r = runner.invoke(app, ["plan", "--lengths", _write(tmp_path, fmt), *POLICIES[policy]])
    assert r.exit_code == 0, r.output
    lines = [ln for ln in r.stderr.splitlines() if "of one token" in ln]
    assert len(lines) == 1 and lines[0].startswith("warning: "), r.stderr
    assert "2 row(s) of one token" in lines[0] and "train nothing" in lines[0], lines[0]
    assert f"lengths.{fmt} row {FIRST}" in lines[0], lines[0]


def test_a_plan_without_rows_of_one_token_says_none(tmp_path):
    r = runner.invoke(app, ["--json", "plan", "--lengths", _write(tmp_path, "txt", [5, 2, 30]), "-C", "64"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert (d["changes"]["sequences_one_token"], d["changes"]["sequences_untrained"]) == (0, 0), d["changes"]
    assert (d["one_token_rows"], d["first_one_token"]) == (0, ""), d
    r = runner.invoke(app, ["plan", "--lengths", _write(tmp_path, "txt", [5, 2, 30]), "-C", "64"])
    assert "of one token" not in r.stderr, r.stderr


def test_plan_says_what_pack_says_of_the_same_rows(tmp_path):
    """The same rows packed (token ids, no labels: every token a target) and planned from their
    lengths: the same `changes`."""
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"input_ids": list(range(7, 7 + n))}) + "\n" for n in LENGTHS))
    p = runner.invoke(app, ["--json", "pack", str(data), "-C", "64", "-o", str(tmp_path / "out"),
                            "--cache-dir", str(tmp_path / "c"), "--no-progress"])
    assert p.exit_code == 0, p.output
    r = runner.invoke(app, ["--json", "plan", "--lengths", _write(tmp_path, "txt"), "-C", "64"])
    assert r.exit_code == 0, r.output
    packed, planned = json.loads(p.stdout), json.loads(r.stdout)
    assert planned["changes"] == packed["changes"], (planned["changes"], packed["changes"])


# every command that says the rows of one token: plan packs nothing, nor does pack --dry-run
SAYERS = {"plan": lambda t: ["plan", "--lengths", _write(t, "txt"), "-C", "64"],
          "pack": lambda t: ["pack", _ids(t), "-C", "64", "-o", str(t / "out"), "--cache-dir", str(t / "c"),
                             "--no-progress"],
          "pack --dry-run": lambda t: ["pack", _ids(t), "-C", "64", "--dry-run", "--cache-dir", str(t / "c"),
                                       "--no-progress"]}


def _ids(tmp_path) -> str:
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"input_ids": list(range(7, 7 + n))}) + "\n" for n in LENGTHS))
    return str(data)


@pytest.mark.parametrize("command", SAYERS)
def test_the_one_token_warning_says_what_holds_for_the_command_that_says_it(tmp_path, command):
    """It said "packed" under plan, which packs nothing: one wording, true of a plan and a pack alike."""
    r = runner.invoke(app, SAYERS[command](tmp_path))
    assert r.exit_code == 0, r.output
    line = next(ln for ln in r.stderr.splitlines() if "of one token" in ln)
    assert "packed" not in line, line
    assert line.startswith("warning: 2 row(s) of one token kept in the slabs, though they train nothing"), line


@pytest.mark.parametrize("policy", POLICIES)
def test_pack_reads_the_cache_lengths_once_for_its_counts(tmp_path, monkeypatch, policy):
    """R-5 (s47): under truncate/split summary.with_cache read the cache's length column twice (once
    in batches for the rows of one token, once whole for the cuts); once now, and the same counts."""
    import sys

    from packtool.tokenize.cache import TokenizedCache
    reads = []
    for name in ("lengths", "length_batches"):
        def counted(self, *a, _f=getattr(TokenizedCache, name), **k):
            if sys._getframe(1).f_code.co_name == "with_cache":
                reads.append(_f.__name__)
            return _f(self, *a, **k)
        monkeypatch.setattr(TokenizedCache, name, counted)
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"input_ids": list(range(7, 7 + n))}) + "\n" for n in LENGTHS))
    p = runner.invoke(app, ["--json", "pack", str(data), *POLICIES[policy], "-o", str(tmp_path / "out"),
                            "--cache-dir", str(tmp_path / "c"), "--no-progress"])
    assert p.exit_code == 0, p.output
    assert len(reads) == 1, reads
    assert json.loads(p.stdout)["changes"]["sequences_one_token"] == 2, p.stdout
