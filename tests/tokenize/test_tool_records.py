"""F4 (S48A-16's rest): another tool's JSON record met among the data (a downloader's cache.json beside
its data/, since S48A-16 read as data unless packtool wrote it; a manifest.json of another format) is
a .json file of one object. Read as JSON Lines, a one-line record was one row, refused with the shape's
fix alone ("cannot tell the input shape from columns etag; fix with --shape ..."), which no such file
can follow; a pretty-printed one was told to save "the rows inside it" as an array. Every door (a
folder, a glob, a store prefix, the file named; auto or a chosen shape) says it is one JSON object
whose keys no shape reads, and that a tool's record is left out of the inputs: the fix that fits,
which then packs."""
from __future__ import annotations

import json
import os

import pytest
from conftest import GPT2, upload_tree
from typer.testing import CliRunner

from packtool.cli.app import app

runner = CliRunner()

RECORDS = {  # the record's name, its text
    "cache.json one line": ("cache.json", '{"etag": "x", "url": "https://example.org/a.jsonl"}\n'),
    "cache.json pretty": ("cache.json", '{\n  "etag": "x",\n  "url": "https://example.org/a.jsonl"\n}\n'),
    "manifest.json of another format": ("manifest.json", '{"format": "my-dataset", "files": ["data/a.jsonl"]}'),
}
DOORS = ("folder", "glob", "store prefix", "the file")


def _tree(root, name: str, text: str) -> None:
    (root / "um" / "ds" / "data").mkdir(parents=True)
    rows = [{"text": f"row {i} of the user's data"} for i in range(6)]
    (root / "um" / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:3]))
    (root / "um" / "ds" / "data" / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[3:]))
    (root / "um" / "ds" / name).write_text(text)


@pytest.mark.parametrize("shape", ["auto", "text"])
@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("record", list(RECORDS))
def test_a_tool_record_among_the_data_is_said_with_the_fix_that_fits(tmp_path, monkeypatch, request, record, door,
                                                                      shape):
    name, text = RECORDS[record]
    _tree(tmp_path, name, text)
    monkeypatch.chdir(tmp_path)
    spec = {"folder": "um", "glob": "um/ds/*", "the file": f"um/ds/{name}"}.get(door)
    if door == "store prefix":
        spec = f"{request.getfixturevalue('s3')}/um"
        upload_tree(str(tmp_path / "um"), spec)
    flags = ["--tokenizer", GPT2, "-C", "256", "--dry-run", "-q", "--cache-dir", "c"]
    r = runner.invoke(app, ["pack", spec, *flags, *(["--shape", shape] if shape != "auto" else [])])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    said = lines[0]
    assert f"ds/{name}" in said and "holds one JSON object" in said and "another tool's record" in said, said
    assert "leave it out" in said and "cannot tell the input shape" not in said, said
    assert "rows inside it" not in said, said
    if door == "folder":  # the fix followed: the data files named themselves pack
        ok = runner.invoke(app, ["pack", "um/b.jsonl", "um/ds/data", *flags])
        assert ok.exit_code == 0, ok.output


def test_a_one_line_row_of_another_shape_keeps_the_shape_fix(tmp_path):
    """A .json file of one row whose keys a shape reads (a column short of it) is a row: the shape's
    fix stands."""
    path = tmp_path / "one.json"
    path.write_text('{"prompt": "2+2?"}\n')
    r = runner.invoke(app, ["pack", str(path), "--tokenizer", GPT2, "-C", "256", "--dry-run", "-q",
                            "--cache-dir", str(tmp_path / "c")])
    assert r.exit_code == 2 and "another tool's record" not in r.stderr and "--shape" in r.stderr, r.stderr
    assert os.path.basename(str(path)) in r.stderr
