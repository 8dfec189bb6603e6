"""S40-1: every single-file output is held for its whole run (output.lock, the lock `pack -o`
and `train --save / --json-log` take): `plan -o` and `inspect --html`, from the CLI or through
the library writers. Two concurrent runs on one path both exited 0 and the last one silently won
(its check at start found the path free, or --overwrite let both replace it). A second run is
refused at once in one line naming the path, the flag, the run holding it and the fix; the
user's files stay byte-identical and nothing is left. The lock file itself keeps its rules: a
link or a user's file under its name is refused and left as it is."""
from __future__ import annotations

import fcntl
import os
import subprocess
import sys

import numpy as np
import pytest
from leftover_support import USER, dead_pid, snapshot, tree
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.errors import PacktoolOutputError
from packtool.output.lock import lock_text

runner = CliRunner()


def lock_file(target) -> str:
    """The lock beside a path (output.lock.lock_file), as a run of packtool of any version names it."""
    return os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.packtool.lock")


@pytest.fixture
def proj(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    np.save(tmp_path / "lengths.npy", np.arange(1, 60, dtype=np.int64))
    r = runner.invoke(app, ["plan", "--lengths", "lengths.npy", "-C", "64", "-o", "given.parquet"])
    assert r.exit_code == 0, r.output
    return tmp_path


def _library_plan(path, overwrite):
    import packtool
    from packtool.planning.plan_file import write_plan
    return write_plan(packtool.plan(np.arange(1, 9)), path, overwrite)


def _library_html(path, overwrite):
    from packtool.inspection.html import write_html
    from packtool.inspection.planned import inspect_plan_file
    return write_html(inspect_plan_file("given.parquet", compare=False, what_if=False), path, overwrite)


def _cli(*argv):
    return lambda path, overwrite: runner.invoke(app, [*argv, path, *(["--overwrite"] if overwrite else [])])


# every single-file output: (its writer, the file name, its flag, the command and kind the lock names)
WRITERS = {
    "plan -o": (_cli("plan", "--lengths", "lengths.npy", "-C", "64", "-o"), "plan.parquet", "--output", "plan",
                "plan file"),
    "inspect --lengths --html": (_cli("inspect", "--lengths", "lengths.npy", "-C", "64", "--no-what-if", "--html"),
                                 "report.html", "--html", "inspect", "report"),
    "inspect --plan --html": (_cli("inspect", "--plan", "given.parquet", "--no-what-if", "--html"), "report.html",
                              "--html", "inspect", "report"),
    "library write_plan": (_library_plan, "plan.parquet", "--output", "plan", "plan file"),
    "library write_html": (_library_html, "report.html", "--html", "inspect", "report"),
}


def _flag(writer) -> str:
    """The flag as the error names it: the CLI's spelling, or the library's argument name."""
    flag = WRITERS[writer][2]
    return flag.lstrip("-") if writer.startswith("library") else flag


def _refused(writer, path, overwrite) -> str:
    """The one error line of a refused write (the CLI: exit 2; the library: packtool's error)."""
    if writer.startswith("library"):
        with pytest.raises(PacktoolOutputError) as e:
            WRITERS[writer][0](path, overwrite)
        return f"error: {e.value}"
    r = WRITERS[writer][0](path, overwrite)
    text = r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.exit_code == 2 and "Traceback" not in text and len(lines) == 1, text
    return lines[0]


@pytest.mark.parametrize("there", [False, True], ids=["new", "a file there, --overwrite"])
@pytest.mark.parametrize("writer", WRITERS)
def test_a_file_another_run_holds_is_refused_at_once(proj, writer, there):
    _, name, _, command, what = WRITERS[writer]
    flag = _flag(writer)
    target = proj / name
    if there:
        target.write_bytes(USER)
    fd = os.open(lock_file(target), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.pwrite(fd, lock_text(4242, command), 0)
        before = snapshot(proj)
        line = _refused(writer, name, there)
        assert snapshot(proj) == before  # the held path and the user's files as they were
    finally:
        os.close(fd)
        os.unlink(lock_file(target))
    assert f"{name}: another packtool {command} (pid 4242) is writing this {what}" in line, line
    assert f"pick another {flag}" in line, line
    assert not any(n.startswith(".") for n in os.listdir(proj))  # no temporary, no lock left


@pytest.mark.parametrize("writer", ["plan -o", "inspect --lengths --html"])
def test_a_second_real_run_is_refused_while_the_first_writes(proj, writer):
    """The finding's example with two processes: a run that holds the file (as the CLI does from
    its start to its write) and a second run on the same path with --overwrite."""
    _, name, flag, command, _ = WRITERS[writer]
    hold = ("from packtool.planning.plan_file import holding_plan_path as h" if command == "plan" else
            "from packtool.inspection.html import holding_html_path as h")
    first = subprocess.Popen([sys.executable, "-c", f"{hold}\nimport sys\nwith h({name!r}, True):\n"
                              "    print('held', flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=proj)
    try:
        assert first.stdout.readline() == "held\n"
        line = _refused(writer, name, True)
    finally:
        first.communicate("")
    assert f"another packtool {command} (pid {first.pid}) is writing this" in line, line
    assert f"pick another {flag}" in line and not os.path.exists(proj / name)
    r = WRITERS[writer][0](name, True)  # the first run over: the path is free again
    assert r.exit_code == 0 and os.path.isfile(proj / name), r.output


LOCKS = {
    "a link to the user's file": lambda lock, user: os.symlink(user, lock),
    "a dangling link": lambda lock, user: os.symlink(str(user) + ".missing", lock),
    "the user's file": lambda lock, user: open(lock, "wb").write(USER),
    "a second name of the user's file": lambda lock, user: os.link(user, lock),
}


@pytest.mark.parametrize("lock", LOCKS)
@pytest.mark.parametrize("writer", WRITERS)
def test_the_lock_file_is_never_written_through_nor_removed(proj, writer, lock):
    name, flag = WRITERS[writer][1], _flag(writer)
    user = proj / "thesis.txt"
    user.write_bytes(USER)
    LOCKS[lock](lock_file(proj / name), user)
    before = tree(proj)
    line = _refused(writer, name, False)
    assert tree(proj) == before, line  # the user's file byte-identical, the lock's name as it was
    assert lock_file(name) in line and f"pick another {flag}" in line, line
    assert "a symbolic link" in line if "link to" in lock or "dangling" in lock else "not a packtool lock" in line


@pytest.mark.parametrize("writer", WRITERS)
def test_a_dead_runs_lock_is_taken_and_removed(proj, writer):
    _, name, _, command, _ = WRITERS[writer]
    with open(lock_file(proj / name), "wb") as f:
        f.write(lock_text(dead_pid(), command))
    r = WRITERS[writer][0](name, False)
    assert r is None or r.exit_code == 0, r.output
    assert os.path.isfile(proj / name) and not os.path.lexists(lock_file(proj / name))
