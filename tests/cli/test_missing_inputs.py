"""Issue 23 class 4 (S28-14): a path that is not there, or not the kind the argument takes (a
file for a packed-output folder, a folder for a one-file flag), is a bad input in every command:
README's exit 2 and one `error:` line naming the path, `--json` too. verify's exit 1 stays
"the output was checked and fails a check" (a folder without a manifest or with a damaged one);
a path with nothing there to check is not that."""
from __future__ import annotations

import json

import pytest
from conftest import GPT2, GSM8K
from test_bad_inputs import expect_error, runner

from packtool.cli.app import app

TRAIN = ["--vocab-size", "128", "--steps", "1", "--device", "cpu"]

# command line with {p} the bad path ({out}: a good packed output) -> the kind of path it takes
CASES = {
    "plan --lengths": (["plan", "--lengths", "{p}"], "file"),
    "pack INPUT": (["pack", "{p}", "--tokenizer", GPT2, "-o", "{tmp}/o", "--cache-dir", "{tmp}/c"], "input"),
    "inspect DIR": (["inspect", "{p}"], "folder"),
    "inspect --lengths": (["inspect", "--lengths", "{p}"], "file"),
    "inspect --plan": (["inspect", "--plan", "{p}"], "file"),
    "verify DIR": (["verify", "{p}"], "folder"),
    "verify --source": (["verify", "{out}", "--source", "{p}", "--cache-dir", "{tmp}/c"], "input"),
    "train DIR": (["train", "{p}", *TRAIN], "folder"),
}


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    d = tmp_path_factory.mktemp("good")
    r = runner.invoke(app, ["pack", GSM8K, "--prompt-field", "question", "--response-field", "answer",
                            "--tokenizer", GPT2, "-C", "1024", "-o", str(d / "out"), "--cache-dir",
                            str(d / "cache"), "--no-progress"])
    assert r.exit_code == 0, r.stdout + r.stderr
    return str(d / "out")


def _bad_path(tmp_path, takes: str, what: str) -> str:
    if what == "missing":
        return str(tmp_path / "nope")
    if takes == "folder":  # a file where a packed output folder goes
        (tmp_path / "a.txt").write_text("10\n")
        return str(tmp_path / "a.txt")
    (tmp_path / "adir").mkdir()  # a folder (holding nothing to read) where a file goes
    return str(tmp_path / "adir")


@pytest.mark.parametrize("json_out", [False, True])
@pytest.mark.parametrize("what", ["missing", "wrong kind"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_path_exits_2_with_one_line(tmp_path, out, case, what, json_out):
    args, takes = CASES[case]
    if case.startswith("train"):
        pytest.importorskip("torch")
    p = _bad_path(tmp_path, takes, what)
    args = [a.format(p=p, out=out, tmp=tmp_path) for a in args] + (["--json"] if json_out else [])
    if case.startswith("train") and json_out:
        pytest.skip("train has no --json")
    line = expect_error(tmp_path, args, 2, p, json_out=json_out)
    assert "re-run" not in line and "FAILED" not in line, line
    if what == "wrong kind" and takes != "input":  # says what it got, not a reader's internals
        assert ("a folder" if takes == "file" else "a file") in line, line


def test_verify_still_exits_1_for_a_folder_that_fails_its_checks(tmp_path):
    """A folder that is there but holds no manifest: verify checked it and says why (exit 1)."""
    (tmp_path / "empty").mkdir()
    r = runner.invoke(app, ["verify", str(tmp_path / "empty"), "--json"])
    assert r.exit_code == 1, r.stdout + r.stderr
    d = json.loads(r.stdout)
    assert not d["ok"] and d["counts"] == {"manifest": 1}
