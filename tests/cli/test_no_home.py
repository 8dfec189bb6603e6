"""With HOME unset and no entry in the password database (a container run as an arbitrary uid),
Python's expanduser keeps `~` as it is, so every place that put something under `~` made a
folder named `~` in the working directory (stop 40 Left 4): numba's compiled kernels
(~/.cache/numba, when packtool's folder is not writable: at the CLI's first import, even for
--version), the datasets cache of `to_hf`; the default tokenized cache said "the user's entry
gives '~'" of an entry that does not exist. Each place is one line naming HOME and the fix
(HOME, PACKTOOL_CACHE_DIR / NUMBA_CACHE_DIR / HF_HOME, or the argument), no traceback and no
folder named `~`.

In this process "no home" is HOME unset and the password database without this uid; the
kernels' case is a real run as a uid with no entry (setpriv), where packtool's folder is not
writable, as in an image built by root."""
from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile

import pyarrow as pa
import pytest
from conftest import GPT2, GSM8K
from typer.testing import CliRunner

import packtool
from packtool.align import Alignment
from packtool.cli.app import app
from packtool.errors import PacktoolError
from packtool.hf import SlabDataset

GSM = ["--prompt-field", "question", "--response-field", "answer"]
NO_ENTRY = "HOME is not set and this user"


@pytest.fixture
def no_home(monkeypatch, tmp_path):
    def missing(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")
    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.delenv("PACKTOOL_CACHE_DIR", raising=False)
    monkeypatch.setattr(pwd, "getpwuid", missing)
    assert os.path.expanduser("~") == "~"
    monkeypatch.chdir(tmp_path)  # where a folder named `~` would be made
    return tmp_path


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    root = tmp_path_factory.mktemp("packed")
    out = str(root / "out")
    packtool.pack(pa.table({"input_ids": [[1, 2, 3], [4, 5, 6, 7]]}), alignment=Alignment(capacity=16), output=out,
                  cache_dir=str(root / "cache"))
    return out


def _cli(args):
    r = CliRunner().invoke(app, args)
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.exit_code == 2 and len(errors) == 1 and "Traceback" not in r.output, r.output
    return errors[0]


PLACES = {  # place -> (PACKTOOL_CACHE_DIR, run it, the words its line must hold besides HOME)
    "the default tokenized cache": (
        "", lambda t, out: _cli(["pack", GSM8K, *GSM, "--tokenizer", GPT2, "-o", str(t / "o"), "--dry-run"]),
        ["uid", "no entry in the password database", "PACKTOOL_CACHE_DIR", "--cache-dir"]),
    "-o ~/x": (
        "", lambda t, out: _cli(["pack", GSM8K, *GSM, "--tokenizer", GPT2, "-o", "~/x", "--cache-dir", str(t / "c")]),
        ["-o", "give the full path"]),
    "PACKTOOL_CACHE_DIR=~/c": (
        "~/c", lambda t, out: _cli(["pack", GSM8K, *GSM, "--tokenizer", GPT2, "-o", str(t / "o"), "--dry-run"]),
        ["PACKTOOL_CACHE_DIR", "give the full path"]),
    "to_hf(cache_dir='~/hf')": (
        "", lambda t, out: _raised(lambda: SlabDataset(out).to_hf(cache_dir="~/hf")),
        ["~/hf", "give the full path"]),
}


def _raised(fn) -> str:
    with pytest.raises(PacktoolError) as e:
        fn()
    return str(e.value)


@pytest.mark.parametrize("place", list(PLACES))
def test_each_place_that_reads_home_is_one_line(packed, no_home, monkeypatch, place):
    cache_env, run, words = PLACES[place]
    monkeypatch.setenv("PACKTOOL_CACHE_DIR", cache_env)  # "": unset, as a shell's `X=`
    line = run(no_home, packed)
    assert NO_ENTRY in line and all(w in line for w in words), line
    assert not os.path.exists(no_home / "~"), os.listdir(no_home)


def _as_no_user(args, cwd, **env):
    """`args` run as a uid with no password entry and no HOME (root only can switch)."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv to run as a uid with no password entry")
    uid = next(u for u in range(54321, 60000) if not _has_entry(u))
    root = os.path.dirname(os.path.dirname(os.path.abspath(packtool.__file__)))
    keep = {"PATH": "/usr/bin:/bin", "PYTHONPATH": root, **env}
    return subprocess.run([setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", sys.executable, *args],
                          cwd=cwd, env=keep, capture_output=True, text=True, timeout=300)


def _has_entry(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


@pytest.fixture
def open_dir():
    d = tempfile.mkdtemp(prefix="packtool-no-home-")  # a folder the other uid may write
    os.chmod(d, 0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("json_out", [False, True])
@pytest.mark.parametrize("args", [["pack", "in.jsonl", "-o", "out", "--cache-dir", "cache"], ["--version"]],
                         ids=["pack", "--version"])
def test_the_kernels_cache_with_no_home_is_one_line_before_any_import(open_dir, args, json_out):
    if os.stat(os.path.dirname(packtool.__file__)).st_mode & 0o002:
        pytest.skip("packtool's folder is writable by everyone: numba keeps the kernels there")
    r = _as_no_user(["-m", "packtool", *(["--json"] if json_out else []), *args], open_dir)
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.returncode == 2 and len(errors) == 1 and "Traceback" not in r.stderr, r.stderr
    assert NO_ENTRY in errors[0] and "NUMBA_CACHE_DIR" in errors[0] and "set HOME" in errors[0], errors
    if json_out:
        assert json.loads(r.stdout.strip().splitlines()[-1])["error"]["flag"] == "HOME", r.stdout
    assert os.listdir(open_dir) == [], os.listdir(open_dir)  # no folder named `~`


def test_with_numba_cache_dir_the_kernels_go_there(open_dir):
    """The neighbour: NUMBA_CACHE_DIR given, the CLI starts (and nothing is named `~`)."""
    kernels = os.path.join(open_dir, "kernels")
    r = _as_no_user(["-m", "packtool", "--version"], open_dir, NUMBA_CACHE_DIR=kernels)
    assert r.returncode == 0 and r.stdout.startswith("packtool "), r.stderr
    assert "~" not in os.listdir(open_dir), os.listdir(open_dir)


def test_to_hf_with_no_home_names_the_datasets_cache(open_dir, packed):
    """A real run with no home: datasets' default cache ~/.cache/huggingface would be a folder `~`."""
    out = os.path.join(open_dir, "out")
    shutil.copytree(packed, out)
    for d, _, names in os.walk(out):
        os.chmod(d, 0o755)
        for n in names:
            os.chmod(os.path.join(d, n), 0o644)
    code = ("from packtool.hf import SlabDataset\nfrom packtool.errors import PacktoolError\n"
            "try:\n    SlabDataset('out').to_hf()\nexcept PacktoolError as e:\n    print(e)\n")
    r = _as_no_user(["-c", code], open_dir, NUMBA_CACHE_DIR=os.path.join(open_dir, "kernels"))
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip()
    assert line.startswith("to_hf: " + NO_ENTRY) and "cache_dir=" in line and "HF_HOME" in line, r.stdout + r.stderr
    assert "~" not in os.listdir(open_dir), os.listdir(open_dir)
