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


PACK = ("packtool.pack(pa.table({'input_ids': [[1, 2, 3]]}), alignment=packtool.Alignment(capacity=16), "
        "output='o', cache_dir='c')")
LIBRARY = {  # each library entry that loads packtool's kernels, as a program calls it (in `open_dir`, `out` beside)
    "packtool.pack": "import packtool, pyarrow as pa\n" + PACK,
    "packtool.plan": "import packtool\npacktool.plan([3, 5, 7], packtool.Alignment(capacity=16))",
    "packtool.verify": "import packtool\npacktool.verify('out')",
    "packtool.inspect": "import packtool\npacktool.inspect('out')",
    "packtool.inspect_lengths": "import packtool\npacktool.inspect_lengths([3, 5, 7], packtool.Alignment(capacity=16))",
    "packtool.online": "from packtool.align import Alignment\nfrom packtool.online import StepPacker\n"
                       "StepPacker(Alignment(capacity=16)).pack([3, 5])",
    "packtool.hf": "from packtool.hf import SlabDataset\nlist(SlabDataset('out'))",
    "packtool.megatron": "from packtool.megatron import PackedSlabDataset\nPackedSlabDataset('out')",
    "a module of packtool": "from packtool.packing import pack\nfrom packtool.align import Alignment\n"
                            "import pyarrow as pa\npack(pa.table({'input_ids': [[1, 2, 3]]}), Alignment(capacity=16), "
                            "output='o', cache_dir='c')",
    "numba loaded first": "import numba, packtool, pyarrow as pa\n" + PACK,
}
READ_WITHOUT_KERNELS = ("packtool.hf", "packtool.megatron")  # numpy reads: they run, and make nothing


@pytest.mark.parametrize("entry", list(LIBRARY))
def test_the_library_with_no_home_is_the_clis_one_line_before_the_kernels_load(open_dir, packed, entry):
    """The CLI checks before its modules load; the library's names load them on first use (and a
    program may import a module of packtool, or numba, itself): each that loads the kernels refuses
    in the CLI's line, in the library's words, and nothing is made, no folder named `~` in the
    program's folder (the datasets' readers load none: they run)."""
    if os.stat(os.path.dirname(packtool.__file__)).st_mode & 0o002:
        pytest.skip("packtool's folder is writable by everyone: numba keeps the kernels there")
    out = os.path.join(open_dir, "out")
    shutil.copytree(packed, out)
    for d, _, names in os.walk(out):
        os.chmod(d, 0o755)
        for n in names:
            os.chmod(os.path.join(d, n), 0o644)
    body = "".join(f"    {ln}\n" for ln in LIBRARY[entry].split("\n"))
    code = ("from packtool.errors import PacktoolError\ntry:\n" + body
            + "except PacktoolError as e:\n    print(type(e).__name__, e)\nelse:\n    print('ran')\n")
    r = _as_no_user(["-c", code], open_dir)
    lines = r.stdout.strip().splitlines()
    assert r.returncode == 0 and len(lines) == 1 and "Traceback" not in r.stderr, r.stdout + r.stderr
    if entry in READ_WITHOUT_KERNELS:
        assert lines == ["ran"], lines
    else:
        assert lines[0].startswith("PacktoolConfigError " + NO_ENTRY), lines
        assert all(w in lines[0] for w in ("set HOME", "NUMBA_CACHE_DIR", "PACKTOOL_CACHE_DIR", " cache_dir ")), lines
    assert sorted(os.listdir(open_dir)) == ["out"], os.listdir(open_dir)  # no `~`, no `o`, no `c`


def test_a_programs_own_numba_is_not_packtools_to_refuse(open_dir):
    """The neighbour: with packtool imported, the program's own `import numba` goes on (packtool's kernels
    are not loaded by it); packtool refuses once one of its own modules would load them."""
    code = ("import packtool\nimport numba\nprint('numba')\nfrom packtool.errors import PacktoolError\n"
            "try:\n    packtool.verify\nexcept PacktoolError as e:\n    print(e)\n")
    r = _as_no_user(["-c", code], open_dir)
    lines = r.stdout.strip().splitlines()
    assert r.returncode == 0 and lines[0] == "numba" and lines[1].startswith(NO_ENTRY), r.stdout + r.stderr
    assert os.listdir(open_dir) == [], os.listdir(open_dir)
