"""S35-4: a write that fails for room (a full disk ENOSPC, a used-up quota EDQUOT, the file size
limit EFBIG: what `ulimit -f` gives) said `error: File too large` or pyarrow's "Error writing
bytes to file", naming no file, no stage and no fix, with `--json` kind `io` and path null. On
every write path it is one line naming the file being written (a cache file under --cache-dir
or the default cache, a slab in the folder built beside -o, a file packtool writes whole: plan
-o, inspect --html, cache.json, a checkpoint; a log appended to), the stage where the file is
not the command's own product, what ran out and the fix; the kind and flag are those of the
argument that chose the place; nothing half-written is left.

The command lines run under a real file size limit in one child process (_no_room_child.py: a
pytest worker under the limit would keep it in its pools); the library's writers and the
wording of each errno run here."""
from __future__ import annotations

import errno
import json
import os
import resource
import subprocess
import sys
from contextlib import contextmanager

import numpy as np
import pytest

import packtool.cli.failure as failure
from packtool.cli.flags import FLAG_OF
from packtool.errors import PacktoolError, spelled_as
from packtool.output.files import open_append, write_file

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# case -> (kind, flag, the folder the file lies in (from the child's folder), stage words or None)
CLI_CASES = {
    "pack: the cache under --cache-dir": ("cache", "--cache-dir", "c1/", "while tokenizing"),
    "pack: the default cache": ("cache", "--cache-dir", "home/.cache/packtool/tokenized/", "while tokenizing"),
    "pack: the slabs beside -o": ("output", "--output", ".o3.packtool-tmp-", "while writing slabs"),
    "plan: -o": ("output", "--output", "p.parquet", None),
    "inspect: --html": ("output", "--html", "r.html", None),
}


@pytest.fixture(scope="module")
def child_runs(tmp_path_factory) -> tuple[str, dict]:
    t = str(tmp_path_factory.mktemp("noroom"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, HERE, os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, os.path.join(HERE, "_no_room_child.py"), t], capture_output=True,
                       text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return t, {d["case"]: d for d in map(json.loads, r.stdout.splitlines())}


def _said(message: str, fix_flag: str | None, code: int = errno.EFBIG) -> None:
    assert "\n" not in message and f"({errno.errorcode[code]})" in message, message
    assert ("raise the file size limit (`ulimit -f`)" if code == errno.EFBIG else "free space there") in message, message
    if fix_flag:
        assert f"or give {fix_flag} a place on another disk, and re-run" in message, message


@pytest.mark.parametrize("case", sorted(CLI_CASES))
def test_every_command_write_that_fails_for_room_names_its_file(child_runs, case):
    t, runs = child_runs
    kind, flag, under, stage = CLI_CASES[case]
    run = runs[case]
    err = run["error"]
    assert run["code"] == 2 and err is not None, run
    assert (err["kind"], err["flag"]) == (kind, flag), err
    assert err["path"] and err["path"].startswith(os.path.join(t, under)), err
    assert err["message"].startswith(f"{err['path']}: cannot be written"), err
    assert stage is None or stage in err["message"], err
    _said(err["message"], flag)
    assert run["left"] == [], run  # nothing half-written: no cache entry, no output, no temporary


@contextmanager
def _file_size_limit(limit: int):
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))


def _report(monkeypatch, capsys, e, **args) -> dict:
    monkeypatch.setitem(failure._STATE, "args", args)
    monkeypatch.setitem(failure._STATE, "running", "train")
    assert failure.report(e, json_out=True) == 2
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])["error"]


def _log(p):  # train's --json-log: appended to, through its own file object
    f = open_append(p, "json_log")
    try:
        f.write("x" * 8192)
        f.flush()
    finally:
        try:
            f.close()
        except OSError:
            pass


def _whole(p, flag):  # a file written whole (a checkpoint, cache.json, plan -o)
    with write_file(p, flag, replace=True) as f:
        f.write(b"x" * 8192)


def _tofile(p):  # numpy's tofile into a file object (the spill's routed rows): a short write, no errno
    with open(p, "wb") as f:
        np.zeros(4096, np.int64).tofile(f)


# writer -> (the argument's name, its flag, kind)
WRITERS = {
    "a log appended to (--json-log)": (_log, "json_log", "--json-log", "output"),
    "a file written whole (--save)": (lambda p: _whole(p, "save"), "save", "--save", "output"),
    "a file written whole (cache.json)": (lambda p: _whole(p, "cache_dir"), "cache_dir", "--cache-dir", "cache"),
    "numpy's tofile (--output)": (_tofile, "output", "--output", "output"),
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_every_library_writer_names_the_file_that_ran_out_of_room(tmp_path, monkeypatch, capsys, writer):
    write, name, flag, kind = WRITERS[writer]
    p = str(tmp_path / "f.out")
    with pytest.raises((OSError, PacktoolError)) as e, spelled_as(FLAG_OF), _file_size_limit(4096):
        write(p)  # as the command line runs the library: its errors name the flags
    err = _report(monkeypatch, capsys, e.value, **{name: p})
    assert (err["kind"], err["flag"], err["path"]) == (kind, flag, p), err
    assert err["message"].startswith(f"{p}: cannot be written"), err
    assert "free space there" in err["message"] or "ulimit -f" in err["message"], err
    assert f"or give {flag} a place on another disk" in err["message"], err


# each errno of the class, raised by a write into a file object (as a Python or pyarrow write does)
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EFBIG])
@pytest.mark.parametrize("place,flag,kind", [("out/.tmp/slab.parquet", "--output", "output"),
                                             ("cache/entry/tokens.i32", "--cache-dir", "cache"),
                                             ("elsewhere/x.bin", None, "io")])
def test_each_errno_of_the_class_says_what_ran_out_and_the_fix(tmp_path, monkeypatch, capsys, code, place, flag, kind):
    p = tmp_path / place
    p.parent.mkdir(parents=True)
    try:
        with open(p, "wb") as f:
            raise OSError(code, os.strerror(code))  # what f.write raises: no filename
    except OSError as e:
        err = _report(monkeypatch, capsys, e, output=str(tmp_path / "out"), cache_dir=str(tmp_path / "cache"))
    assert (err["kind"], err["flag"], err["path"]) == (kind, flag, str(p)), err
    _said(err["message"], flag, code)
    assert err["message"].startswith(f"{p}: cannot be written: "), err
