"""F3: Python's tempfile finding no folder it can write a file in (torch's import asks it, through
dill, before `packtool train` reads anything: under `ulimit -f 0` every folder refuses its 4-byte
probe) ended `error: [Errno 2] No usable temporary directory found in [...]`, kind io with no flag
and no fix. It is now one line naming the folders tried, the cause (the file size limit when that
is what refuses a file) and the fix, `flag` TMPDIR (the system temp folder's setting), kind io.
For real through train, and in-process for every command (the failure raised where its work runs)."""
from __future__ import annotations

import functools
import json
import os
import resource
import subprocess
import sys
import tempfile

import pytest
from cli_main import raiser, run_main
from conftest import ROOT
from test_thread_refused import COMMANDS, packed  # noqa: F401  (the commands' sites, and their output)


@functools.cache
def _no_temp_folder() -> FileNotFoundError:
    """tempfile's own error, under a real file size limit of 0 bytes in this process."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, hard))
    try:
        tempfile._get_default_tempdir()
    except FileNotFoundError as e:
        return e
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    raise AssertionError("a file was written under a file size limit of 0")


# the limit in force when the line is made -> what it says
LIMITS = {"ulimit -f 0": (0, "raise the file size limit"), "no limit": (resource.RLIM_INFINITY, "set TMPDIR")}


@pytest.mark.parametrize("limit", LIMITS)
@pytest.mark.parametrize("command", COMMANDS)
def test_no_usable_temp_folder_is_one_line_naming_tmpdir(packed, monkeypatch, capsys, command, limit):  # noqa: F811
    argv, site, module, _ = COMMANDS[command]
    soft, fix = LIMITS[limit]
    failure = _no_temp_folder()  # (made under the real limit, before getrlimit stands in for it)
    real = resource.getrlimit
    monkeypatch.setattr(resource, "getrlimit",
                        lambda r: (soft, resource.RLIM_INFINITY) if r == resource.RLIMIT_FSIZE else real(r))
    monkeypatch.setattr(site, raiser(module, lambda: failure))
    ended = run_main(monkeypatch, ["--json", *argv(packed)])
    cap = capsys.readouterr()
    err = [ln for ln in cap.err.splitlines() if ln.startswith("error:")]
    assert ended == [2] and len(err) == 1 and "Traceback" not in cap.err, cap.err
    d = json.loads(cap.out)["error"]
    assert (d["kind"], d["flag"]) == ("io", "TMPDIR"), d
    assert d["message"].startswith("no usable temporary folder: ") and "'/tmp'" in d["message"], d
    assert fix in d["message"] and ("ulimit -f" in d["message"]) == (soft == 0), d


def test_train_under_a_file_size_limit_of_0_names_it(tmp_path):
    pytest.importorskip("torch")

    def limits():
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("PACKTOOL_DEBUG", None)
    env.pop("TMPDIR", None)
    r = subprocess.run([sys.executable, "-m", "packtool", "--json", "train", str(tmp_path / "slabs"), "--steps", "1"],
                       env=env, preexec_fn=limits, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    d = json.loads(r.stdout)["error"]
    assert (d["kind"], d["flag"]) == ("io", "TMPDIR") and "(`ulimit -f`) being 0 bytes" in d["message"], d
