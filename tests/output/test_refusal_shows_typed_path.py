"""A refusal of a write path shows the path as the user typed it, and the path it resolves to
beside it in parentheses only where resolving did more than make it absolute (a link in a parent
folder, `..`, `~`): `train --save lnk/ck` said `/abs/real/ck/mp_rank_00.pt: ...`, a path the
user never typed (issue 23). Over every write path's up-front refusals that resolve first
(train --save's folder rules, the files it replaces, inspect --html, plan -o, a --json-log and
a log opened for appending); --json's path is what was typed."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from typer.testing import CliRunner

from packtool.errors import PacktoolError
from packtool.inspection.html import check_html_path
from packtool.output.files import check_log_file, open_append


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """real/ (a packed output, a checkpoint folder holding a link, a user's folder and file, a
    FIFO) and lnk -> real; the working folder is tmp_path and HOME is lnk."""
    real = tmp_path / "real"
    for d in ("packed", "ck", "mine"):
        (real / d).mkdir(parents=True)
    (real / "packed" / ".manifest.json").write_text("{}")
    os.symlink("/nonexistent", real / "ck" / "mp_rank_00.pt")
    (real / "mine" / "notes.txt").write_text("mine\n")
    (real / "report.html").write_text("keep\n")
    (real / "afile").write_text("x\n")
    os.mkfifo(real / "fifo.log")
    os.symlink(real, tmp_path / "lnk")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "lnk"))
    np.save(tmp_path / "lengths.npy", np.array([5, 7, 9]))
    return tmp_path


def _refusal(call):
    """The call as one case: (the refusal, its --json path), or None where it took the path."""
    def run(path):
        try:
            call(path)
        except PacktoolError as e:
            return e, e.path
        return None
    return run


def _save(d):
    from packtool.megatron.checkpoint import check_save
    check_save(d, None, False)


def _plan_cli(out):
    from packtool.cli.app import app
    r = CliRunner().invoke(app, ["plan", "--lengths", "lengths.npy", "-C", "64", "-o", out, "--json"])
    err = json.loads(r.output.strip().splitlines()[-1])["error"]
    return PacktoolError(err["message"]), err["path"]


# (the call, the path typed, the file or folder it names once resolved, below tmp_path)
CASES = {
    "save: inside a packed output": (_refusal(_save), "lnk/packed/ck", "real/packed/ck/mp_rank_00.pt", "mp_rank_00.pt"),
    "save: a link of a checkpoint's name": (_refusal(_save), "lnk/../lnk/ck", "real/ck/mp_rank_00.pt", "mp_rank_00.pt"),
    "save: not a folder": (_refusal(_save), "lnk/afile", "real/afile", ""),
    "save: a folder of other files": (_refusal(_save), "./lnk/mine", "real/mine", ""),
    "html: inside a packed output": (_refusal(check_html_path), "lnk/packed/r.html", "real/packed/r.html", ""),
    "html: an existing file": (_refusal(check_html_path), "lnk/report.html", "real/report.html", ""),
    "html: ~": (_refusal(check_html_path), "~/report.html", "real/report.html", ""),
    "plan -o: inside a packed output": (_plan_cli, "lnk/packed/plan.parquet", "real/packed/plan.parquet", ""),
    "json-log: an existing file": (_refusal(lambda p: check_log_file(p, "json_log")), "lnk/afile", "real/afile", ""),
    "log appended: a FIFO": (_refusal(lambda p: open_append(p, "json_log")), "lnk/fifo.log", "real/fifo.log", ""),
}


@pytest.mark.parametrize("case", CASES)
def test_a_write_path_refusal_shows_the_path_typed(tree, case):
    call, typed, resolved, below = CASES[case]
    shown = os.path.join(typed, below) if below else typed
    got = call(typed)
    if got is None:
        pytest.fail(f"{typed} was not refused")
    e, path = got
    assert str(e).startswith(f"{shown} ({tree / resolved}): "), str(e)
    assert path == shown


@pytest.mark.parametrize("case", ["save: a folder of other files", "html: an existing file"])
def test_a_path_that_only_becomes_absolute_shows_no_parentheses(tree, case):
    call, typed, resolved, below = CASES[case]
    got = call(resolved)  # typed as the real path, relative to the working folder
    e, path = got
    assert str(e).startswith(f"{resolved}: ") and "(" not in str(e).split(":")[0], str(e)
