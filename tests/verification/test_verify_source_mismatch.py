"""`verify --source` with another tokenizer or other files than `pack` read: every segment then
mismatches, so the note above the problems names the cause (which option, which files)."""
from __future__ import annotations

import json
import shutil

import pytest
from conftest import GPT2, GSM8K, MISTRAL, PEPS
from typer.testing import CliRunner

from packtool.cli.app import app

runner = CliRunner()
GSM_ARGS = ["--prompt-field", "question", "--response-field", "answer"]


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    root = tmp_path_factory.mktemp("mismatch")
    shutil.copy(GSM8K, root / "gsm.jsonl")
    out = root / "out"
    r = runner.invoke(app, ["pack", str(root / "gsm.jsonl"), "--tokenizer", GPT2, *GSM_ARGS, "-C", "2048",
                            "-o", str(out), "--no-progress", "--cache-dir", str(root / "cache")])
    assert r.exit_code == 0, r.stdout + r.stderr
    return root, out


def _notes(root, out, *args):
    r = runner.invoke(app, ["verify", str(out), "--json", "--cache-dir", str(root / "cache"), *args])
    d = json.loads(r.stdout.strip().splitlines()[-1])
    return r.exit_code, d["notes"]


def test_same_source_has_no_note(packed):
    root, out = packed
    code, notes = _notes(root, out, "--source", str(root / "gsm.jsonl"))
    assert code == 0 and notes == []


def test_other_tokenizer_is_named(packed):
    root, out = packed
    code, notes = _notes(root, out, "--source", str(root / "gsm.jsonl"), "--tokenizer", MISTRAL)
    assert code == 1 and len(notes) == 1
    assert f"tokenizer {MISTRAL} (pack: {GPT2})" in notes[0], notes


def test_other_files_are_named(packed):
    root, out = packed
    code, notes = _notes(root, out, "--source", PEPS, "--text-field", "text")
    assert code == 1 and len(notes) == 1
    assert "files peps_long5.jsonl.gz given, gsm.jsonl packed but not given" in notes[0], notes
