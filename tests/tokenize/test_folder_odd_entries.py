"""RA-4 (session 48): below a folder input, an entry that is not a regular file and has no data
name was dropped without a word, though a folder's file is "read, refused, or named in one note,
never left out" (S47A-12): a link to nothing (`shard3 -> /mnt/nfs/shard3` with the mount gone, a
`latest -> run7` after run7 was pruned: all its rows lost, rc 0), a FIFO; and a folder below the
input that cannot be listed (EACCES, EIO) was walked as empty, its files' rows lost.

The class, at every door a local folder is walked by (a folder input, a `**` glob): a link to
nothing is refused naming it and its target (what it stood for cannot be known), any other
entry that is not a regular file is named in the passed-over note, a folder that cannot be
listed is refused naming it and the reason.

RA-1 (session 49): a glob that matches the link itself (`DIR/*`, `DIR/**/*`) passed it over as "a
file of a kind packtool does not read as data ... rename or convert", rc 0, its rows lost; and a data
file's name on a FIFO there was read as the data file. One rule (readers._refuse_odd_entries) for
every local listing: the folder, `DIR/**`, `DIR/**/*`, `DIR/*`."""
from __future__ import annotations

import errno
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from packtool.cli.app import app

runner = CliRunner()
ROWS = {"input_ids": [[1, 2, 3], [4, 5, 6, 7]]}


def _tree(tmp_path) -> str:
    d = tmp_path / "d"
    for i, sub in enumerate(("p1", "p2")):
        (d / sub).mkdir(parents=True)
        pq.write_table(pa.table({"input_ids": [[t + i for t in ids] for ids in ROWS["input_ids"]]}),
                       d / sub / "a.parquet")
    return str(d)


def _pack(spec: str):
    r = runner.invoke(app, ["--json", "pack", spec, "-C", "64", "--dry-run", "-q"])
    return r, json.loads(r.stdout.strip().splitlines()[-1])


DANGLING = {"a link to a folder whose mount is gone": ("shard3", "/nonexistent/mnt/shard3"),
            "a link to a pruned run": ("latest", "run7")}


# every door a local listing reaches an entry by: the folder, and globs over it
DOORS = {"folder": lambda d: d, "DIR/**": lambda d: os.path.join(d, "**"),
         "DIR/**/*": lambda d: os.path.join(d, "**", "*"), "DIR/*": lambda d: os.path.join(d, "*")}


@pytest.mark.parametrize("door", sorted(DOORS))
@pytest.mark.parametrize("case", sorted(DANGLING))
def test_a_link_to_nothing_is_refused_naming_it(tmp_path, case, door):
    name, target = DANGLING[case]
    d = _tree(tmp_path)
    os.symlink(target, os.path.join(d, name))
    r, got = _pack(DOORS[door](d))
    assert r.exit_code == 2, r.output
    msg = got["error"]["message"]
    assert name in msg and target in msg and "link to nothing" in msg and "\n" not in msg, msg
    assert "rename or convert" not in msg, msg


@pytest.mark.parametrize("door", sorted(DOORS))
def test_a_data_name_on_a_fifo_is_refused_naming_it(tmp_path, door):
    d = _tree(tmp_path)
    os.mkfifo(os.path.join(d, "late.jsonl"))
    r, got = _pack(DOORS[door](d))
    assert r.exit_code == 2, r.output
    msg = got["error"]["message"]
    assert "late.jsonl" in msg and "not regular files" in msg and "\n" not in msg, msg


def test_a_fifo_without_a_data_name_is_named_in_the_note(tmp_path):
    d = _tree(tmp_path)
    os.mkfifo(os.path.join(d, "pipe"))
    r, got = _pack(d)
    assert r.exit_code == 0, r.output
    assert got["sequences"] == 4, got
    said = [n for n in got["notes"] if "passed over" in n]
    assert len(said) == 1 and "pipe" in said[0], got["notes"]


@pytest.mark.parametrize("door", ["folder", "** glob"])
def test_a_folder_that_cannot_be_listed_is_refused_naming_it(tmp_path, monkeypatch, door):
    d = _tree(tmp_path)
    shut = os.path.join(d, "p2")
    scandir = os.scandir

    def refusing(path="."):  # the box runs as root: chmod 000 would not stop it
        if os.path.abspath(path) == shut:
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return scandir(path)
    monkeypatch.setattr(os, "scandir", refusing)
    r, got = _pack(d if door == "folder" else os.path.join(d, "**", "*.parquet"))
    assert r.exit_code == 2, r.output
    msg = got["error"]["message"]
    assert "p2" in msg and "Permission denied" in msg and "\n" not in msg, msg


@pytest.mark.parametrize("spec", ["D", "D/**", "D/**/*.parquet"])
def test_the_input_folder_that_cannot_be_listed_is_said_as_itself(tmp_path, monkeypatch, spec):
    """RA-8 (session 49): the folder given, unlistable, was "folder D below the input cannot be listed";
    RA-12: by the glob doors, whose fixed part is the folder typed, still."""
    d = _tree(tmp_path)
    scandir = os.scandir

    def refusing(path="."):
        if os.path.abspath(path) == d:
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return scandir(path)
    monkeypatch.setattr(os, "scandir", refusing)
    r, got = _pack(spec.replace("D", d, 1))
    assert r.exit_code == 2, r.output
    msg = got["error"]["message"]
    assert "the input folder cannot be listed" in msg and "below the input" not in msg, msg
