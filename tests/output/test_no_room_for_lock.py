"""S49A-8: a write door on a place with no byte free (a full disk, `ulimit -f 0`) failed with "a
write failed while writing" (no file, no flag, kind io) and left a 0-byte `.NAME.packtool.lock`
(its inode needs no block, its line does), or an empty marker in a cache temporary; every later
run on that path was then refused as "not a packtool lock file ... another user's" until the user
deleted packtool's own file. Now every door fails in one line naming the path, the flag and the
fix, and leaves nothing: the run after it is not refused. Run as a user's process under
RLIMIT_FSIZE 0 (the writes fail with EFBIG; Python ignores SIGXFSZ)."""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("typer")
from megatron_runs import TINY, small_slabs  # noqa: E402

TRAIN = [*TINY, "--ffn", "64", "--log-every", "0", "--steps", "1"]


@pytest.fixture(scope="module")
def slabs(tmp_path_factory):
    return small_slabs(tmp_path_factory.mktemp("room") / "d")


def _rows(work):
    rows = [{"input_ids": list(range(1, 6 + i)), "loss_mask": [1] * (5 + i)} for i in range(4)]
    (work / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(work / "rows.jsonl")


# every write door: (the command line, given the work folder `w` and the slabs `s`; its flag; its --json kind)
DOORS = {
    "pack -o": (lambda w, s: ["pack", _rows(w), "-C", "64", "--cache-dir", str(w / "cache"), "-o", "full/out"],
                "--output", "output"),
    "plan -o": (lambda w, s: ["plan", "--lengths", str(w / "lengths.npy"), "-C", "64", "-o", "full/p.parquet"],
                "--output", "output"),
    "inspect --html": (lambda w, s: ["inspect", s, "--html", "full/r.html"], "--html", "output"),
    "train --save": (lambda w, s: ["train", s, *TRAIN, "--save", "full/ck"], "--save", "output"),
    "train --json-log": (lambda w, s: ["train", s, *TRAIN, "--json-log", "full/log.jsonl"], "--json-log", "output"),
    "the cache root": (lambda w, s: ["pack", _rows(w), "-C", "64", "--dry-run", "--cache-dir", "full/cache"],
                       "--cache-dir", "cache"),
}


# torch's import probes the system temp folder by writing a file there, which this limit fails
# before `train` starts; the finding's full disk was the output's place alone, so the probe is skipped
MAIN = "import sys, tempfile; tempfile.tempdir = '/tmp'; sys.argv[0] = 'packtool'; from packtool.cli import main; main()"


def _no_file_room():
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


@pytest.mark.parametrize("door", DOORS)
def test_a_write_door_with_no_room_names_path_and_flag_and_leaves_nothing(door, slabs, tmp_path):
    argv, flag, kind = DOORS[door]
    np.save(tmp_path / "lengths.npy", np.arange(1, 60, dtype=np.int64))
    (tmp_path / "full").mkdir()
    line = argv(tmp_path, slabs)
    r = subprocess.run([sys.executable, "-c", MAIN, "--json", *line, "-q"], cwd=tmp_path,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_no_file_room)
    assert r.returncode == 2, r.stderr
    err = json.loads(r.stdout)["error"]
    said = r.stderr.strip().splitlines()
    assert len(said) == 1 and "Traceback" not in r.stderr, r.stderr
    assert err["flag"] == flag and err["kind"] == kind, err
    assert "full/" in err["message"] and "ulimit -f" in err["message"] and flag in err["message"], err
    assert os.listdir(tmp_path / "full") in ([], ["cache"]), os.listdir(tmp_path / "full")
    assert os.listdir(tmp_path / "full" / "cache") == [] if (tmp_path / "full" / "cache").exists() else True
    # room back: the same run is not refused for anything the failed one left
    if door.startswith("train"):
        return  # its locks are the output's (same owner); a second tiny training adds minutes, not proof
    again = subprocess.run([sys.executable, "-m", "packtool", *line, "-q"], cwd=tmp_path,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert again.returncode == 0, again.stderr
