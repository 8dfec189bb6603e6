"""stranger32 S32-23: a path or value a user (or a downloaded dataset's shard names) supplied is
printed with its control characters escaped (errors.shown), wherever packtool prints it: error
lines, notes, warnings, result lines. An ESC never reaches the terminal (a command to it), a
newline never splits a line; --json keeps the exact text, JSON-escaped."""
from __future__ import annotations

import io
import json
import re

import pytest
from conftest import GPT2
from rich.console import Console
from typer.testing import CliRunner

from packtool.cli.app import app

runner = CliRunner()
NAME = "e\x1b[2Jx\ny"  # ESC + "clear screen", and a newline
SHOWN = "e\\x1b[2Jx\\ny"
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")  # every control character but the line ends


def _clean(text: str) -> str:
    assert not RAW.search(text), repr(text)
    return text


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    root = tmp_path_factory.mktemp("ctl")
    rows = [{"text": f"row {i} says hello " * 4} for i in range(3)]  # over 16 tokens, under 64
    (root / f"{NAME}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "l.txt").write_text("3\n5\n")
    (root / "neg.txt").write_text("3\n-5\n")
    r = runner.invoke(app, ["pack", str(root / f"{NAME}.jsonl"), "--tokenizer", GPT2, "-C", "64", "-q",
                            "-o", str(root / NAME), "--cache-dir", str(root / "c")])
    assert r.exit_code == 0, r.stdout + r.stderr
    return root, r


def _pack_args(root, *more):
    cap = [] if "-C" in more else ["-C", "64"]  # a case's own -C replaces it (a flag given twice is refused)
    return ["pack", str(root / f"{NAME}.jsonl"), "--tokenizer", GPT2, *cap, "-q",
            "--cache-dir", str(root / "c"), *more]


CASES = {  # where a supplied path or value is printed -> (command line, the stream that says it)
    "error: missing input": (lambda d: ["plan", "--lengths", str(d / f"{NAME}.txt")], "stderr"),
    "error: a row of an input": (lambda d: _pack_args(d, "-C", "16", "--dry-run"), "stderr"),
    "error: a usage error's value": (lambda d: ["plan", "--lengths", str(d / "l.txt"), "--fp8", NAME], "stderr"),
    "error: an existing -o": (lambda d: _pack_args(d, "-o", str(d / NAME)), "stderr"),
    # --overwrite: a dry run refuses an existing output as the real run does (L3)
    "note: --dry-run's -o": (lambda d: _pack_args(d, "--dry-run", "--overwrite", "-o", str(d / NAME)), "stdout"),
    "result: Done line": (None, "stdout"),
    "result: verify's header": (lambda d: ["verify", str(d / NAME), "-q"], "stdout"),
    "result: inspect's header": (lambda d: ["inspect", str(d / NAME), "-q", "--no-what-if"], "stdout"),
    "result: HTML report line": (lambda d: ["inspect", "--lengths", str(d / "l.txt"), "-C", "16", "-q",
                                            "--html", str(d / f"{NAME}.html")], "stdout"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_printed_path_has_its_controls_escaped(case, work):
    root, packed = work
    argv, stream = CASES[case]
    r = packed if argv is None else runner.invoke(app, argv(root))
    _clean(r.stdout)
    _clean(r.stderr)
    said = getattr(r, stream)
    # a message another module built as f"{path}: ..." folds the newline to a space (one line all
    # the same); a path packtool places itself (path=, a result line) shows it as \n
    assert SHOWN in said or SHOWN.replace("\\n", " ") in said, (r.stdout, r.stderr)
    if not case.startswith("error"):
        assert SHOWN in said, said
    if case == "result: Done line":  # the commands it names paste as they are: bash's $'...'
        assert f"packtool verify $'{root}/{SHOWN}'" in said, said
    if case.startswith("error"):
        assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith("error: "), r.stderr


def test_json_keeps_the_exact_path(work):
    root, _ = work
    r = runner.invoke(app, [*_pack_args(root, "-C", "16", "--dry-run"), "--json"])
    d = json.loads(r.stdout)["error"]
    assert d["path"] == str(root / f"{NAME}.jsonl") and SHOWN in d["message"], d
    _clean(r.stderr)


def test_a_note_and_a_warning_are_escaped(capsys):
    from packtool.cli.printing import print_plan_summary
    from packtool.notes import NOTES, note
    from test_warnings_on_stderr import _summary
    note(f"{NAME} was read", label="note")
    assert NOTES[-1] == f"{NAME} was read"  # kept exact for a library caller and --json
    s = _summary("nonfinite")
    s.side_nonfinite["lp"]["first"]["file"] = NAME
    print_plan_summary(s, Console(file=io.StringIO()))
    err = _clean(capsys.readouterr().err)
    assert f"note: {SHOWN} was read\n" in err and f"in {SHOWN} row 0" in err, err


def test_an_os_error_names_its_file_escaped():
    from packtool.cli.failure import describe
    _, msg, _ = describe(FileNotFoundError(2, "No such file or directory", NAME))
    assert msg.startswith(f"{SHOWN}: ") and not RAW.search(msg), msg
