"""The pack lock `.NAME.packtool.lock` is removed only when it is provably packtool's (the line
packtool writes into it, a plain one-link file of this user); a user's file of that name (a pid,
nothing, any text) is refused in one line naming it and the fix, never deleted (S33-9)."""
from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.output.lock import lock_text

runner = CliRunner()
LOCK = ".o1.packtool.lock"


@pytest.fixture
def proj(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with open(tmp_path / "toks.jsonl", "w") as f:
        for i in range(20):
            f.write(json.dumps({"input_ids": list(range(1, 8 + i % 5))}) + "\n")
    return tmp_path


def _pack():
    return runner.invoke(app, ["pack", "toks.jsonl", "-C", "64", "--cache-dir", "cache", "--no-progress", "-q",
                               "-o", "o1"])


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.mark.parametrize("content", [b"42\n", b"42", b"", b"\n", b"packtool lock, pid 42", b"my notes\n"])
def test_a_users_file_under_the_locks_name_is_never_deleted(proj, content):
    (proj / LOCK).write_bytes(content)
    r = _pack()
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.exit_code == 2 and len(errors) == 1, r.stdout + r.stderr
    assert LOCK in errors[0] and "not a packtool lock file" in errors[0] and "move it away" in errors[0]
    assert (proj / LOCK).read_bytes() == content and not os.path.exists(proj / "o1")


def test_packtools_own_lock_of_a_dead_run_is_taken_and_removed(proj):
    (proj / LOCK).write_bytes(lock_text(_dead_pid()))
    r = _pack()
    assert r.exit_code == 0, r.stdout + r.stderr
    assert not os.path.lexists(proj / LOCK) and os.path.isdir(proj / "o1")


def test_an_empty_lock_another_run_holds_is_that_runs(proj):
    """Between its exclusive create and its write a running pack's lock is empty: held, it is
    reported as that run's, and left."""
    fd = os.open(proj / LOCK, os.O_RDWR | os.O_CREAT | os.O_EXCL)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        r = _pack()
        assert r.exit_code == 2 and "another packtool pack (pid ?)" in r.stderr, r.stdout + r.stderr
        assert os.path.exists(proj / LOCK)
    finally:
        os.close(fd)
