"""L4: `inspect --plan` of a truncate plan showed its overflow figures as 0 (rows cut 0, tokens
dropped 0), in the table and in --json, while `plan` had cut rows: a cut row looks like a row of
U tokens, so the segments do not hold them. The plan file now records the figures its plan made
(planning.plan_file.plan_config) and inspect shows those (read_plan_overflow); a file written
before they were recorded shows them as unknown (null in --json, "?" in the table) with a note,
never as 0. Every overflow policy, the library, the CLI's table and --json, alignments with and
without CP; a record edited against the file's settings is refused as an edited file.
"""
from __future__ import annotations

import json
from dataclasses import asdict

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from packtool.align import Alignment
from packtool.cli.app import app
from packtool.errors import PacktoolError
from packtool.inspection.planned import inspect_plan_file
from packtool.planning.core import PackingConfig, plan
from packtool.planning.plan_file import META_KEY, write_plan
from packtool.planning.summary import plan_summary

LENGTHS = np.array([10, 100, 30, 200, 5, 64, 65, 17, 300, 40])
ALIGNS = {"C=64": Alignment(capacity=64), "cp=2 C=128": Alignment(cp=2, capacity=128)}
POLICIES = ["truncate", "split", "singleton"]
PLACES = ["library", "cli --json", "cli table"]


def _overflow(path, place):
    if place == "library":
        return asdict(inspect_plan_file(path, what_if=False).overflow), ""
    r = CliRunner().invoke(app, ["inspect", "--plan", path, "--no-what-if", *(["--json"] if "json" in place else [])])
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    if "json" in place:
        return json.loads(r.stdout)["overflow"], r.stderr
    row = next(ln for ln in r.stdout.splitlines() if "overflow (" in ln)
    more = r.stdout.split(row, 1)[1].split("dp=", 1)[0]  # the row's folded lines
    return " ".join((row + more).replace("│", " ").split()), r.stderr


def _without_record(path, out):
    t = pq.read_table(path)
    meta = json.loads(t.schema.metadata[META_KEY])
    del meta["overflow"]
    pq.write_table(t.replace_schema_metadata({**t.schema.metadata, META_KEY: json.dumps(meta).encode()}), out)
    return out


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("align", ALIGNS)
def test_a_plan_files_overflow_figures_are_the_plans(tmp_path, align, policy, place):
    p = plan(LENGTHS, ALIGNS[align], PackingConfig(overflow=policy))
    want = asdict(p.overflow)
    assert want["sequences"] > 0  # the lengths overflow under every alignment here
    path = str(tmp_path / "plan.parquet")
    write_plan(p, path)
    got, _ = _overflow(path, place)
    if place == "cli table":
        assert f"{want['sequences']} sequences" in got and f"dropped {want['tokens_dropped']}" in got, got
        assert f"chunks {want['chunks']}" in got and f"singletons {want['singletons']}" in got, got
    elif place == "cli --json":  # plan --json's object: the figures the masks hold null (RB-6)
        assert got == plan_summary(p).to_dict()["overflow"]
    else:
        assert got == want


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("policy", POLICIES)
def test_an_older_plan_file_says_truncates_figures_are_unknown(tmp_path, policy, place):
    p = plan(LENGTHS, ALIGNS["C=64"], PackingConfig(overflow=policy))
    write_plan(p, str(tmp_path / "new.parquet"))
    path = _without_record(str(tmp_path / "new.parquet"), str(tmp_path / "old.parquet"))
    if place == "library":
        from packtool.notes import mark, since
        start = mark()
        got, _ = _overflow(path, place)
        notes = " ".join(since(start))
    else:
        got, notes = _overflow(path, place)
    want = plan_summary(p).to_dict()["overflow"] if place == "cli --json" else asdict(p.overflow)
    if policy != "truncate":  # the segments hold these: counted from them, no note
        assert (got == want) if place != "cli table" else f"{want['sequences']} sequences" in got
        assert "truncate's figures" not in notes
        return
    if place == "cli table":
        assert "? sequences" in got and "dropped ?" in got, got
    else:
        assert got["sequences"] is None and got["tokens_dropped"] is None, got
    assert "truncate's figures" in notes and "packtool plan --output" in notes, notes


@pytest.mark.parametrize("edit", ["another policy", "a negative count", "not a number"])
def test_an_edited_record_is_refused(tmp_path, edit):
    path = str(tmp_path / "plan.parquet")
    write_plan(plan(LENGTHS, ALIGNS["C=64"], PackingConfig(overflow="truncate")), path)
    t = pq.read_table(path)
    meta = json.loads(t.schema.metadata[META_KEY])
    meta["overflow"].update({"another policy": {"policy": "split"}, "a negative count": {"tokens_dropped": -1},
                             "not a number": {"sequences": "2"}}[edit])
    pq.write_table(t.replace_schema_metadata({**t.schema.metadata, META_KEY: json.dumps(meta).encode()}), path)
    with pytest.raises(PacktoolError) as e:
        inspect_plan_file(path, what_if=False)
    msg = str(e.value)
    assert msg.startswith(f"{path}: ") and "\n" not in msg and "write it again with `packtool plan --output`" in msg
