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
    assert f"tokenizer {MISTRAL} (pack: {GPT2}: pass --tokenizer {GPT2})" in notes[0], notes
    # S30-12: the two fingerprints shown whole (cut to 16 digits, two that differ late read alike)
    given, said = notes[0].split("input fingerprint ", 1)[1].split(":")[0].split(", the manifest says ")
    assert len(given) == len(said) == 64 and given != said, notes


def test_other_files_are_named(packed):
    root, out = packed
    code, notes = _notes(root, out, "--source", PEPS, "--text-field", "text")
    assert code == 1 and len(notes) == 1
    assert "files peps_long5.jsonl.gz given, gsm.jsonl packed but not given" in notes[0], notes


def test_same_name_in_another_folder_is_named_by_its_path(packed, tmp_path):
    """Stranger trial S28-9: b/gsm.jsonl (other rows, the same name) read as 'gsm.jsonl given,
    gsm.jsonl packed but not given', as if the packed file had been given."""
    root, out = packed
    other = tmp_path / "b" / "gsm.jsonl"
    other.parent.mkdir()
    other.write_text("".join((root / "gsm.jsonl").read_text().splitlines(keepends=True)[5:]))
    code, notes = _notes(root, out, "--source", str(other))
    assert code == 1 and len(notes) == 1
    assert f"files {other} given, {root / 'gsm.jsonl'} packed but not given" in notes[0], notes


def test_the_same_file_changed_since_pack_is_said(tmp_path):
    src = tmp_path / "a" / "x.jsonl"
    src.parent.mkdir()
    src.write_text('{"input_ids": [1, 2, 3]}\n{"input_ids": [4, 5]}\n')
    base = ["--cache-dir", str(tmp_path / "cache")]
    r = runner.invoke(app, ["pack", str(src), "-C", "64", "-o", str(tmp_path / "out"), "-q", *base])
    assert r.exit_code == 0, r.output
    src.write_text('{"input_ids": [1, 2, 3]}\n{"input_ids": [4, 6]}\n')
    code, notes = _notes(tmp_path, tmp_path / "out", "--source", str(src))
    assert code == 1 and len(notes) == 1
    import hashlib
    now = hashlib.sha256(src.read_bytes()).hexdigest()
    was = json.loads((tmp_path / "out" / ".manifest.json").read_text())["input"]["files"][0][2]
    assert f"x.jsonl changed since pack (sha256 {now}, the manifest records {was})" in notes[0], notes


def test_the_packed_order_and_the_flag_are_the_fix(packed):
    """S44-11: files given in another order, or another option, were named without the fix."""
    root, out = packed
    lines = (root / "gsm.jsonl").read_text().splitlines(keepends=True)
    (root / "a.jsonl").write_text("".join(lines[:100]))
    (root / "b.jsonl").write_text("".join(lines[100:]))
    two = root / "two"
    r = runner.invoke(app, ["pack", str(root / "a.jsonl"), str(root / "b.jsonl"), "--tokenizer", GPT2, *GSM_ARGS,
                            "-C", "2048", "-o", str(two), "--no-progress", "--cache-dir", str(root / "cache")])
    assert r.exit_code == 0, r.output
    code, notes = _notes(root, two, "--source", str(root / "b.jsonl"), str(root / "a.jsonl"), "--tokenizer", GPT2,
                         *GSM_ARGS)
    assert code == 1 and len(notes) == 1
    assert "files in another order (pack read a.jsonl, b.jsonl: give --source in that order)" in notes[0], notes
    code, notes = _notes(root, out, "--source", str(root / "gsm.jsonl"), "--tokenizer", GPT2,
                         "--prompt-field", "answer", "--response-field", "question")
    assert code == 1 and len(notes) == 1
    assert "prompt_field answer (pack: question: pass --prompt-field question)" in notes[0], notes
