"""Every end of the `packtool` command skips the interpreter's teardown (cli._leave), and a
library program's exit waits for the compile thread: a daemon thread in native code with the
GIL released, torn down under by Py_Finalize, aborted the process (exit 134 after the error
line, 1 run in 3 of `pack bad.csv`: stranger30 S30-4)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from cli_main import run_main
from conftest import GPT2, ROOT


def _cases(tmp):
    (tmp / "l.txt").write_text("3\n5\n")
    (tmp / "bad.csv").write_text("text,other\nhello,1\nworld,2,3\n")
    return {
        "success": (["plan", "--lengths", str(tmp / "l.txt"), "-C", "16"], 0),
        "--help": (["plan", "--help"], 0),
        "usage error": (["plan", "--bogus"], 2),
        "missing input": (["plan", "--lengths", str(tmp / "none.txt")], 2),
        "CSV parse error": (["pack", str(tmp / "bad.csv"), "--tokenizer", GPT2, "--dry-run", "-q",
                             "--cache-dir", str(tmp / "c")], 2),
    }


@pytest.mark.parametrize("case", ["success", "--help", "usage error", "missing input", "CSV parse error"])
def test_every_end_of_the_command_skips_the_teardown(case, tmp_path, monkeypatch, capsys):
    argv, code = _cases(tmp_path)[case]
    ended = run_main(monkeypatch, argv)
    assert ended == [code], capsys.readouterr()


@pytest.mark.parametrize("given, status, said", [(None, 0, ""), (3, 3, ""), ("bye", 1, "bye\n")])
def test_a_sys_exit_argument_is_the_status_it_stands_for(given, status, said, capsys):
    import packtool.cli as cli
    assert cli._status(given) == status
    assert capsys.readouterr().err == said


def test_a_program_ending_within_the_compile_waits_for_it(tmp_path):
    """The compile thread stands in as a 0.5 s native call with the GIL released (ctypes
    usleep) that writes a mark when it returns; the program exits at once. Without the join
    at exit the teardown ends the thread inside the call: no mark (or an abort)."""
    mark = tmp_path / "mark"
    script = tmp_path / "prog.py"
    script.write_text(f"""
import ctypes, sys
import packtool.tokenize.token_rows as tr
from packtool.tokenize.prefetch import warm_compiled_code
libc = ctypes.CDLL(None)
def slow(*a):
    libc.usleep(500000)
    open({str(mark)!r}, "w").write("returned")
tr.first_outside = slow
warm_compiled_code()
sys.exit(2)
""")
    r = subprocess.run([sys.executable, str(script)], env=dict(os.environ, PYTHONPATH=ROOT),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert mark.exists(), "the program's teardown ended the compile thread inside its native call"
