"""Issue 23 class 6: the note that a file's columns of another shape are not read was said on
stderr but missing from the --json object. Every note packtool says goes through one owner
(packtool.notes): said once on stderr and collected, and a command's --json object (its result,
or its error) lists those it said under `notes`. A guard keeps stderr writes in that owner."""
from __future__ import annotations

import ast
import json
import os

import numpy as np
import pytest
from conftest import GPT2
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.output.files import TMP_TAG

runner = CliRunner()
ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "packtool")
# the owner, the error line (failure.py, and cli/__init__ for a Ctrl-C at start-up), a native
# library's own lines held while a pool starts and given back as they were (threads.HeldStderr: no
# note of packtool's), and the trainer and in-trainer API (no --json there); progress bars draw on
# stderr (transient)
ALLOWED = {"notes.py", "cli/failure.py", "cli/__init__.py", "threads.py"}
BARS = {"progress.py", "tokenize/bar.py", "packing.py"}
ELSEWHERE = ("megatron/", "online/")


def _stderr_writes(tree: ast.AST) -> list[int]:
    bad = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and n.attr == "stderr" and getattr(n.value, "id", None) == "sys":
            bad.append(n.lineno)
        elif isinstance(n, ast.Call):
            f = n.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            if name == "warn" and getattr(getattr(f, "value", None), "id", None) == "warnings":
                bad.append(n.lineno)
            elif name == "print" and isinstance(f, ast.Name) and any(k.arg == "file" for k in n.keywords):
                bad.append(n.lineno)
    return bad


def _consoles(tree: ast.AST) -> list[int]:
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "Console"
            and any(k.arg == "stderr" for k in n.keywords)]


def test_every_note_goes_through_the_owner():
    found = []
    for d, _, names in os.walk(ROOT):
        for name in names:
            rel = os.path.relpath(os.path.join(d, name), ROOT).replace(os.sep, "/")
            if not name.endswith(".py") or rel in ALLOWED or rel.startswith(ELSEWHERE):
                continue
            tree = ast.parse(open(os.path.join(d, name)).read())
            found += [f"{rel}:{ln}" for ln in _stderr_writes(tree)]
            found += [f"{rel}:{ln} (Console on stderr)" for ln in _consoles(tree) if rel not in BARS]
    assert not found, f"write notes with packtool.notes.note (--json lists them): {found}"


def _lengths(tmp_path) -> str:
    p = tmp_path / "l.npy"
    np.save(p, np.array([10, 20, 30]))
    return str(p)


def _plan_sp(tmp_path):  # --sp without tensor parallelism: a note, then the plan
    return ["plan", "--lengths", _lengths(tmp_path), "--sp"], "--sp has no effect"


def _inspect_plan_file(tmp_path):  # the settings a plan file records
    out = tmp_path / "p.parquet"
    assert runner.invoke(app, ["plan", "--lengths", _lengths(tmp_path), "-o", str(out)]).exit_code == 0
    return ["inspect", "--plan", str(out)], "settings recorded in the plan file"


def _pack_unread(tmp_path):  # a file with columns of two shapes, one picked: the other's not read
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"text": "a plain document", "question": "2+2?", "answer": "4"}) + "\n")
    return (["pack", str(data), "--tokenizer", GPT2, "--shape", "text", "-C", "256", "-o", str(tmp_path / "out"),
             "--cache-dir", str(tmp_path / "cache")], "are not read")


def _pack_stale(tmp_path):  # a lookalike of a temporary folder beside the output: left, and said
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"input_ids": [1, 2, 3]}) + "\n")
    (tmp_path / f".out.{TMP_TAG}-999999999").mkdir()
    return (["pack", str(data), "-C", "64", "-o", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache")],
            "looks like a packtool temporary folder's")


NOTED = {"plan --sp": _plan_sp, "inspect --plan": _inspect_plan_file, "pack columns not read": _pack_unread,
         "pack stale folders": _pack_stale}


@pytest.mark.parametrize("case", sorted(NOTED))
def test_a_note_on_stderr_is_in_the_json_object(tmp_path, case):
    args, said = NOTED[case](tmp_path)
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    on_stderr = [ln.split(": ", 1)[1] for ln in r.stderr.splitlines() if said in ln]
    assert len(on_stderr) == 1, r.stderr
    assert on_stderr[0] in json.loads(r.stdout)["notes"], r.stdout


def test_a_note_said_before_an_error_is_in_the_error_object(tmp_path):
    r = runner.invoke(app, ["plan", "--lengths", str(tmp_path / "missing.npy"), "--sp", "--json"])
    assert r.exit_code == 2, r.output
    out = json.loads(r.stdout)
    assert out["error"]["kind"] and any("--sp has no effect" in n for n in out["notes"]), out
