"""A flag that names an output FILE refuses a path written as a folder (`newdir/`, `newdir/.`,
`newdir/..`): `resolve`'s abspath dropped the ending and wrote a file named `newdir` (S33-5).
A flag that names an output FOLDER takes the same spelling as the folder."""
from __future__ import annotations

import json
import os
from types import SimpleNamespace

import numpy as np
import pytest
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.errors import PacktoolOutputError

runner = CliRunner()


@pytest.fixture
def proj(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    np.save(tmp_path / "lengths.npy", np.arange(1, 60, dtype=np.int64))
    with open(tmp_path / "toks.jsonl", "w") as f:
        for i in range(20):
            f.write(json.dumps({"input_ids": list(range(1, 8 + i % 5))}) + "\n")
    return tmp_path


def _write(flag: str, path: str):
    """Each file flag as its writer takes it: the CLI (exit 2, one error line) or the library."""
    if flag == "plan -o":
        return runner.invoke(app, ["plan", "--lengths", "lengths.npy", "-o", path])
    if flag == "inspect --html":
        return runner.invoke(app, ["inspect", "--lengths", "lengths.npy", "-C", "64", "--no-what-if", "--html", path])
    if flag == "library write_plan":
        import packtool
        from packtool.planning.plan_file import write_plan
        return write_plan(packtool.plan(np.arange(1, 9)), path)
    if flag == "library write_html":
        from packtool.inspection.html import write_html
        return write_html(None, path)
    pytest.importorskip("torch")
    from packtool.megatron.loop import check_json_log
    return check_json_log(SimpleNamespace(json_log=path, load=None, inputs=(), overwrite=False))


FILE_FLAGS = ["plan -o", "inspect --html", "library write_plan", "library write_html", "train --json-log"]


@pytest.mark.parametrize("ending", ["/", "/.", "/..", "//"])
@pytest.mark.parametrize("flag", FILE_FLAGS)
def test_a_file_flag_refuses_a_folder_spelling(proj, flag, ending):
    path = "newdir" + ending
    before = sorted(os.listdir(proj))
    if flag.startswith(("library", "train")):
        with pytest.raises(PacktoolOutputError, match="(which names a|is a) folder; .*give a file name"):
            _write(flag, path)
    else:
        r = _write(flag, path)
        errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
        assert r.exit_code == 2 and len(errors) == 1, r.stdout + r.stderr
        assert flag.split()[-1] in errors[0] and "a folder;" in errors[0] and "give a file name" in errors[0]
    assert sorted(os.listdir(proj)) == before  # no file named newdir, nothing else


@pytest.mark.parametrize("flag", ["pack -o", "train --save"])
def test_a_folder_flag_takes_a_trailing_separator(proj, flag):
    if flag == "pack -o":
        r = runner.invoke(app, ["pack", "toks.jsonl", "-C", "64", "--cache-dir", "cache", "--no-progress",
                                "-q", "-o", "newdir/"])
        assert r.exit_code == 0, r.stdout + r.stderr
        assert os.path.isdir(proj / "newdir")
    else:
        pytest.importorskip("torch")
        from packtool.megatron.loop import check_save
        assert check_save("newdir/", None, False) == str(proj / "newdir")
