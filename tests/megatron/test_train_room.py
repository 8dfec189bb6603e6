"""`packtool train`'s writes that fail for room (S36-1): the --save checkpoint (at the end, every
--save-every steps, over an earlier one) and the --json-log line. torch.save turned the write's
EFBIG/ENOSPC into "RuntimeError: unexpected pos" (exit 3, "a packtool bug") after all the training,
and left the folder it made; the log's failure named no file. Each is one line naming the file
and the flag, exit 2, an earlier checkpoint kept whole; a checkpoint that cannot fit under the
file size limit or in the disk's free space is refused before step 0."""
from __future__ import annotations

import json
import os
import resource
from collections import namedtuple
from contextlib import contextmanager
from types import SimpleNamespace

import pytest

pytest.importorskip("megatron.core")
pytest.importorskip("typer")
from megatron_runs import TINY, run_cli, small_slabs  # noqa: E402


SMALL = [*TINY, "--log-every", "1"]


@pytest.fixture(scope="module")
def slabs(tmp_path_factory):
    return small_slabs(tmp_path_factory.mktemp("c") / "d", fp8="tensorwise")


@contextmanager
def file_size_limit(n: int):
    """`ulimit -f` for this process only while the block runs (Python ignores SIGXFSZ: a write
    past it fails with EFBIG)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (n, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def _train(slabs, *flags):
    return run_cli(["train", slabs, *SMALL, *flags])


def _one_error(r) -> str:
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.exit_code == 2 and len(errors) == 1, r.output
    assert "internal" not in errors[0] and "Traceback" not in r.output, r.output
    return errors[0]


Case = namedtuple("Case", "flags file flag limit")
WRITES = {  # the write that fails -> (flags, the file named, its flag, the size limit in bytes)
    "--save at the end": Case(["--steps", "1", "--save", "{d}/ck"], "ck", "--save", 130_000),
    "--save-every": Case(["--steps", "3", "--save", "{d}/ck", "--save-every", "1"], "ck", "--save", 130_000),
    "--save over an earlier checkpoint": Case(["--steps", "1", "--save", "{d}/old", "--overwrite"], "old",
                                              "--save", 130_000),
    "--json-log": Case(["--steps", "4", "--json-log", "{d}/l.jsonl"], "l.jsonl", "--json-log", 700),
}


@pytest.mark.parametrize("write", list(WRITES))
def test_a_write_that_fails_for_room_is_one_line_naming_its_file(slabs, tmp_path, monkeypatch, write):
    import packtool.megatron.loop as loop
    case = WRITES[write]
    flags = [f.format(d=tmp_path) for f in case.flags]
    if "old" in case.file:
        assert _train(slabs, "--steps", "1", "--save", str(tmp_path / "old")).exit_code == 0
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    # the room checked before step 0 was taken meanwhile (another job filled the disk)
    monkeypatch.setattr(loop, "check_room", lambda *a: None, raising=False)
    with file_size_limit(case.limit):
        r = _train(slabs, *flags)
    line = _one_error(r)
    assert case.file in line and case.flag in line and "ulimit -f" in line, line
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p.name != "l.jsonl"} == before
    assert not (tmp_path / "ck").exists() or write == "--save-every"  # the folder the failed save made goes
    if write == "--json-log":  # whole lines only: a later run appends to it as its own log
        lines = (tmp_path / "l.jsonl").read_text().splitlines()
        assert lines and all(json.loads(x)["step"] == i for i, x in enumerate(lines))


@pytest.mark.parametrize("short", ["file size limit", "disk space"])
def test_a_checkpoint_that_cannot_fit_is_refused_before_step_0(slabs, tmp_path, monkeypatch, short):
    log = tmp_path / "l.jsonl"
    flags = ["--steps", "2", "--save", str(tmp_path / "ck"), "--json-log", str(log)]
    if short == "disk space":
        real = os.statvfs(tmp_path)
        full = SimpleNamespace(**{**{k: getattr(real, k) for k in dir(real) if k.startswith("f_")},
                                  "f_bavail": 1, "f_frsize": 4096})
        monkeypatch.setattr(os, "statvfs", lambda p: full)
        r = _train(slabs, *flags)
    else:
        with file_size_limit(130_000):
            r = _train(slabs, *flags)
    line = _one_error(r)
    assert "--save" in line and "ck" in line and "needs at least" in line, line
    assert not (tmp_path / "ck").exists() and not (log.exists() and log.read_bytes())  # no step ran
