"""S47A-10: inside ONE folder input (or one glob), a file beside its hard link (`cp -al`, rsync
--link-dest) or a link to it was refused "input given more than once ... pass each file once",
a fix the user (who named the folder once) cannot follow; beside a copy it was read with a note.
A second name of one file inside one folder or glob is now read once, by the file's own name
(the first in path order among names reached through no link), with one note naming both
(repeats.refuse_repeats, the one owner); a file named twice by the user (two arguments, a folder
and a file in it) is still refused (two folder inputs: test_second_names_across_inputs)."""
from __future__ import annotations

import json
import os

import pytest
from conftest import GPT2
from typer.testing import CliRunner

from packtool import notes
from packtool.cli.app import app
from packtool.errors import PacktoolInputError
from packtool.tokenize.readers import resolve_inputs

runner = CliRunner()
NAMES = {"a link": lambda a, b: os.symlink(os.path.basename(a), b),
         "a hard link": lambda a, b: os.link(a, b)}
SPECS = {"folder": lambda d: d, "glob": lambda d: os.path.join(d, "*.jsonl"),
         "glob **": lambda d: os.path.join(d, "**", "*.jsonl")}


def _folder(tmp_path, how) -> str:
    d = tmp_path / "d"
    d.mkdir()
    (d / "a.jsonl").write_text("".join(json.dumps({"text": f"row {i}"}) + "\n" for i in range(3)))
    NAMES[how](str(d / "a.jsonl"), str(d / "b.jsonl"))
    return str(d)


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("how", NAMES)
def test_a_second_name_in_one_folder_is_read_once(how, spec, tmp_path):
    d = _folder(tmp_path, how)
    start = notes.mark()
    assert [f.path for f in resolve_inputs([SPECS[spec](d)])] == [os.path.join(d, "a.jsonl")]
    said = [n for n in notes.since(start) if "second name" in n]
    assert len(said) == 1 and "b.jsonl" in said[0] and "a.jsonl" in said[0] and how in said[0], notes.since(start)


@pytest.mark.parametrize("how", NAMES)
def test_the_cli_packs_its_rows_once(how, tmp_path):
    d = _folder(tmp_path, how)
    r = runner.invoke(app, ["--json", "pack", d, "--tokenizer", GPT2, "-C", "256", "--dry-run", "-q",
                            "--cache-dir", str(tmp_path / "c")])
    assert r.exit_code == 0 and json.loads(r.stdout)["sequences"] == 3, r.output


@pytest.mark.parametrize("given", ["both names", "the folder and a file in it"])
@pytest.mark.parametrize("how", NAMES)
def test_a_file_the_user_names_twice_is_refused(how, given, tmp_path):
    d = _folder(tmp_path, how)
    args = [os.path.join(d, "a.jsonl"), os.path.join(d, "b.jsonl")] if given == "both names" else \
        [d, os.path.join(d, "b.jsonl")]
    with pytest.raises(PacktoolInputError, match="more than once.*pass each file once"):
        resolve_inputs(args)
