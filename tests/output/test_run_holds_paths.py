"""S39-10: every path a run checks at its start and writes later is held for the whole run
(output.lock, the lock `pack -o` takes): `pack -o`, `train --save`, `train --json-log`. Two
`train` runs on one --json-log interleaved their steps (0,0,1,1,2,2) and two on one --save
saved over each other's checkpoint, both exit 0: each found the path free at its start.
A second run is refused at once in one line naming the path, the flag and the run holding it;
the user's files stay byte-identical and nothing is left."""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

pytest.importorskip("megatron.core")
pytest.importorskip("typer")
from leftover_support import snapshot  # noqa: E402
from megatron_runs import TINY, small_slabs  # noqa: E402
from typer.testing import CliRunner  # noqa: E402


RUNNING = b"packtool lock, pid 4242, train\n"  # what a running `train` writes in the lock it holds


def lock_file(target: str) -> str:
    """The lock beside a path (output.lock.lock_file), as a run of packtool of any version names it."""
    return os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.packtool.lock")

MODEL = [*TINY, "--ffn", "64", "--log-every", "0"]
TRAIN = [*MODEL, "--steps", "1"]


@pytest.fixture(scope="module")
def app():
    from packtool.cli.app import app as packtool_app
    return packtool_app


@pytest.fixture(scope="module")
def slabs(tmp_path_factory):
    return small_slabs(tmp_path_factory.mktemp("held") / "d")


@pytest.fixture(scope="module")
def earlier(slabs, tmp_path_factory, app):
    """An earlier run's checkpoint folder and log: what a second run must leave as they are."""
    d = tmp_path_factory.mktemp("earlier")
    r = CliRunner().invoke(app, ["train", slabs, *TRAIN, "--save", str(d / "ck"), "--json-log", str(d / "log")])
    assert r.exit_code == 0, r.output
    return d


def _pack_input(work):
    rows = [{"input_ids": list(range(1, 6 + i)), "loss_mask": [1] * (5 + i)} for i in range(4)]
    (work / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return ["pack", str(work / "rows.jsonl"), "-C", "64", "-q", "--cache-dir", str(work / "cache")]


# every write path a run holds: (what the folder holds before, the path held, the command line)
CASES = {
    "pack -o, new": (None, "out", lambda w, s: [*_pack_input(w), "-o", str(w / "out")], "output"),
    "train --save, new": (None, "ck", lambda w, s: ["train", s, *TRAIN, "--save", str(w / "ck")], "save"),
    "train --save --overwrite, a checkpoint there": (
        "ck", "ck", lambda w, s: ["train", s, *TRAIN, "--save", str(w / "ck"), "--overwrite"], "save"),
    "train --json-log, new": (None, "log", lambda w, s: ["train", s, *TRAIN, "--json-log", str(w / "log")],
                              "json-log"),
    "train --json-log, a log to append to": (
        "log", "log", lambda w, s: ["train", s, *TRAIN, "--json-log", str(w / "log")], "json-log"),
    "train --json-log --overwrite, a log there": (
        "log", "log", lambda w, s: ["train", s, *TRAIN, "--json-log", str(w / "log"), "--overwrite"], "json-log"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_path_another_run_holds_is_refused_at_once(case, slabs, earlier, tmp_path, app):
    there, held, argv, flag = CASES[case]
    work = tmp_path / "w"
    work.mkdir()
    if there == "ck":
        shutil.copytree(earlier / "ck", work / "ck")
    elif there == "log":
        shutil.copyfile(earlier / "log", work / "log")
    args = argv(work, slabs)
    lock = lock_file(str(work / held))
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.pwrite(fd, RUNNING, 0)
        before = snapshot(tmp_path)
        r = CliRunner().invoke(app, args)
        assert snapshot(tmp_path) == before  # the held path and the user's files as they were
    finally:
        os.close(fd)
        os.unlink(lock)
    text = r.stdout + r.stderr
    assert r.exit_code == 2 and "Traceback" not in text, text
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, r.stderr
    assert f"{work / held}: another packtool train (pid 4242) is writing this" in lines[0], lines[0]
    assert f"--{flag}" in lines[0], lines[0]
    assert sorted(os.listdir(work)) == sorted(x for x in ("ck", "log", "rows.jsonl", "cache") if (work / x).exists())


@pytest.mark.parametrize("flag", ["--json-log", "--save"])
def test_two_train_runs_on_one_path(flag, slabs, tmp_path, app):
    """The finding's example: a second real `packtool train` while the first runs."""
    target = tmp_path / ("shared.log" if flag == "--json-log" else "shsave")
    first = subprocess.Popen([sys.executable, "-m", "packtool", "train", slabs, *MODEL, "--steps", "100000",
                              flag, str(target)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        lock = lock_file(str(target))
        for _ in range(1200):  # the first run holds the path from its start
            if os.path.exists(lock) and open(lock, "rb").read().endswith(b", train\n"):
                break
            assert first.poll() is None, first.stderr.read()
            time.sleep(0.05)
        r = CliRunner().invoke(app, ["train", slabs, *TRAIN, flag, str(target), "--seed", "2"])
    finally:
        first.terminate()
        first.wait()
    assert r.exit_code == 2, r.output
    assert f"another packtool train (pid {first.pid}) is writing this" in r.stderr, r.stderr
    assert f"pick another {flag}" in r.stderr
