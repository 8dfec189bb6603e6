"""S49A-7 (local doors): a pid no process can have (beyond a C long, or beyond any pid_max) in a
temporary folder's name beside -o or in the cache root, or in a marker's record, ended the run in
`internal error (a packtool bug) OverflowError` (exit 3): the sweep asked the system about it. Such
a name or record is not packtool's (packtool writes its own pid there): the run goes on, the
folder is named and left as other lookalikes are. The store lease's doors are in
tests/storage/test_store_foreign_lease.py."""
from __future__ import annotations

import json
import os
import socket

import pytest

pytest.importorskip("typer")
from typer.testing import CliRunner  # noqa: E402

from packtool.cli.app import app  # noqa: E402
from packtool.output.leftovers import MARKER  # noqa: E402

BIG = [10**20, 2**63, 2**22 + 1]  # beyond a C long, beyond int64's last, one past Linux's largest pid_max


def _rows(work):
    rows = [{"input_ids": list(range(1, 6 + i)), "loss_mask": [1] * (5 + i)} for i in range(4)]
    (work / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(work / "rows.jsonl")


def _record(pid):
    with open("/proc/sys/kernel/random/boot_id") as f:
        boot = f.read().strip()
    return json.dumps({"host": socket.gethostname(), "boot": boot, "pidns": os.readlink("/proc/self/ns/pid"),
                       "token": "0" * 32, "pid": pid, "start": "1"})


# where a run sweeps: (the folder's place, given the work folder and the pid; whether it holds a marker)
PLACES = {
    "name beside -o": (lambda w, pid: w / f".out.packtool-tmp-{pid}-abcdefgh", False),
    "name in the cache root": (lambda w, pid: w / "cache" / f".tmp-0123456789ab-{pid}-abcdefgh", False),
    "marker beside -o": (lambda w, pid: w / f".out.packtool-tmp-{os.getpid()}-zzzzzzzz", True),
}


@pytest.mark.parametrize("pid", BIG)
@pytest.mark.parametrize("place", PLACES)
def test_a_pid_no_process_can_have_is_a_lookalike_named_and_left(place, pid, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    where, marked = PLACES[place]
    folder = where(tmp_path, pid)
    folder.mkdir(parents=True)
    if marked:
        (folder / MARKER).write_text(_record(pid))
    r = CliRunner().invoke(app, ["pack", _rows(tmp_path), "-C", "64", "-o", "out", "--cache-dir", "cache"])
    assert r.exit_code == 0, r.output
    assert "internal error" not in r.output and "Overflow" not in r.output, r.output
    assert folder.is_dir(), "a lookalike was removed"
    assert folder.name in r.output, r.output
