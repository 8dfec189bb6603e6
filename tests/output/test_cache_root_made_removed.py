"""S50A-1: a --cache-dir that did not exist, on a place that takes no byte (a full disk, `ulimit -f 0`),
was made by `pack` and `verify --source`, the run failed at its temporary's marker, and the folders it
made stayed. The temporary's owner (output.leftovers.owned_temp_dir) removes the folders the run made
for it when it cannot be made; the marker's failure is stood in for in-process."""
from __future__ import annotations

import errno
import os

import pytest
from rows_support import token_rows_jsonl
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.output import leftovers

runner = CliRunner()


@pytest.fixture
def proj(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    token_rows_jsonl(tmp_path)
    r = runner.invoke(app, ["pack", "toks.jsonl", "-C", "64", "--cache-dir", "c0", "-o", "out", "--no-progress", "-q"])
    assert r.exit_code == 0, r.stdout + r.stderr
    return tmp_path


DOORS = {"pack": ["pack", "toks.jsonl", "-C", "64", "--dry-run"],
         "verify --source": ["verify", "out", "--source", "toks.jsonl"]}


@pytest.mark.parametrize("door", DOORS)
def test_a_cache_root_a_failed_run_made_is_removed(proj, monkeypatch, door):
    def full(folder, made=False):  # as mark does when its marker cannot be filled: the folder goes with it
        os.rmdir(folder)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.path.join(folder, leftovers.MARKER))
    monkeypatch.setattr(leftovers, "mark", full)
    r = runner.invoke(app, [*DOORS[door], "--cache-dir", "newc/deep", "--no-progress", "-q"])
    assert r.exit_code in (1, 2) and "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr
    assert not os.path.lexists("newc"), os.listdir("newc")
