"""A tokenized cache root that cannot be written (S45A-5: a team's shared cache mounted
read-only) serves the entries it holds; where an entry must be made there (none for these inputs
and options, a damaged one to rebuild, verify --source's temporary cache) every entry that
tokenizes stops before any work in one line naming the flag (--cache-dir, PACKTOOL_CACHE_DIR,
cache_dir=) and the fix. Before, the first write failed as a bare `PATH: Read-only file system`
naming packtool's own temporary, and a damaged entry was announced as "rebuilding it" first.

The roots are read-only bind mounts in a mount namespace of their own (`unshare -m`) when run as
root, which writes through permission bits; folders of mode 0555 otherwise. Every case runs in
that one child process (CLI commands in-process, library calls) and reports back."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import GPT2, GSM8K

from packtool.align import Alignment
from packtool.packing import pack
from packtool.tokenize.config import TokenizeConfig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIELDS = dict(tokenizer=GPT2, prompt_field="question", response_field="answer")
CLI_TOK = ["--tokenizer", GPT2, "--prompt-field", "question", "--response-field", "answer", "--no-progress"]
# one worker runs the module (--dist loadgroup): its cases come from one child process, run once
pytestmark = pytest.mark.xdist_group("cache_root_read_only")
ROOTS = ("empty", "damaged", "valid")  # ro/<name>: no entry, a damaged entry, the entry these runs ask for
ENTRIES = ("pack", "pack --dry-run", "PACKTOOL_CACHE_DIR", "library pack", "library tokenize_to_cache",
           "verify --source")

CHILD = r"""
import json, os, sys
from typer.testing import CliRunner
from packtool.align import Alignment
from packtool.cli.app import app
from packtool.errors import PacktoolError
from packtool.packing import pack
from packtool.tokenize import tokenize_to_cache
from packtool.tokenize.config import TokenizeConfig
d, cases = sys.argv[1], json.loads(sys.argv[2])
cfg = TokenizeConfig(**cases["fields"])
out = {}
for key, (entry, root) in cases["runs"].items():
    where = os.path.join(d, "ro", root)
    o = os.path.join(d, "out-" + key.replace(" ", "_").replace("/", "_"))
    if entry.startswith("library"):
        try:
            if entry == "library pack":
                pack([os.path.join(d, "in.jsonl")], Alignment(capacity=1024), tokenize=cfg, output=o, cache_dir=where)
            else:
                tokenize_to_cache([os.path.join(d, "in.jsonl")], cfg, cache_dir=where, progress=False)
            out[key] = {"code": 0, "said": ""}
        except PacktoolError as e:
            out[key] = {"code": 2, "said": "error: " + str(e), "type": type(e).__name__}
        except Exception as e:
            out[key] = {"code": 1, "said": f"{type(e).__name__}: {e}", "type": type(e).__name__}
    else:
        env = {"PACKTOOL_CACHE_DIR": where} if entry == "PACKTOOL_CACHE_DIR" else {}
        flag = [] if env else ["--cache-dir", where]
        if entry == "verify --source":
            args = ["verify", os.path.join(d, "packed"), "--source", os.path.join(d, "in.jsonl"), *cases["cli"], *flag]
        else:
            args = ["pack", os.path.join(d, "in.jsonl"), *cases["cli"], "-C", "1024", "-o", o, *flag]
            args += ["--dry-run"] if entry == "pack --dry-run" else []
        r = CliRunner().invoke(app, args, env=env)
        out[key] = {"code": r.exit_code, "said": r.stderr}
    out[key]["output"] = os.path.exists(o)
print("RESULTS " + json.dumps(out))
"""


def _key(entry, root):
    return f"{entry}@{root}"


def _entry_files(folder):
    return {os.path.relpath(os.path.join(dp, f), folder): open(os.path.join(dp, f), "rb").read()
            for dp, _, fs in os.walk(folder) for f in fs}


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    d = tmp_path_factory.mktemp("ro-cache")
    shutil.copy(GSM8K, d / "in.jsonl")
    for r in ROOTS:
        (d / "ro" / r).mkdir(parents=True)
    cfg = TokenizeConfig(**FIELDS)
    pack([str(d / "in.jsonl")], Alignment(capacity=1024), tokenize=cfg, output=str(d / "packed"),
         cache_dir=str(d / "ro" / "valid"))
    shutil.rmtree(d / "ro" / "damaged")
    shutil.copytree(d / "ro" / "valid", d / "ro" / "damaged")
    entry = next(p for p in (d / "ro" / "damaged").iterdir() if p.is_dir())
    with open(entry / "flat" / "tokens.i32", "r+b") as f:  # one changed byte: its checksum fails
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 0x07]))
    before = {r: _entry_files(d / "ro" / r) for r in ROOTS}
    cases = {"fields": FIELDS, "cli": CLI_TOK,
             "runs": {_key(e, r): (e, r) for e in ENTRIES for r in ROOTS}}
    child = [sys.executable, "-c", CHILD, str(d), json.dumps(cases)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    if os.geteuid() == 0:
        mounts = "".join(f"mount --bind {d}/ro/{r} {d}/ro/{r} && mount -o remount,bind,ro {d}/ro/{r} && "
                         for r in ROOTS)
        probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
        if probe.returncode != 0:
            pytest.skip("root without a mount namespace of its own (unshare -m): no read-only folder to test")
        child = ["unshare", "-m", "bash", "-c", mounts + 'exec "$@"', "bash", *child]
    else:
        for r in ROOTS:
            os.chmod(d / "ro" / r, 0o555)
    try:
        p = subprocess.run(child, capture_output=True, text=True, env=env, timeout=600)
    finally:
        for r in ROOTS:
            os.chmod(d / "ro" / r, 0o755)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULTS ")]
    assert p.returncode == 0 and lines, p.stdout[-2000:] + p.stderr[-4000:]
    return json.loads(lines[0][len("RESULTS "):]), before, {r: _entry_files(d / "ro" / r) for r in ROOTS}


def _named(entry):
    return {"PACKTOOL_CACHE_DIR": "PACKTOOL_CACHE_DIR", "library pack": "cache_dir",
            "library tokenize_to_cache": "cache_dir"}.get(entry, "--cache-dir")


@pytest.mark.parametrize("root", ROOTS)
@pytest.mark.parametrize("entry", ENTRIES)
def test_a_cache_root_that_cannot_be_written_is_refused_only_where_it_must_be_written(ran, entry, root):
    results, before, after = ran
    got = results[_key(entry, root)]
    assert after[root] == before[root]  # nothing in the root changed, an entry set aside least of all
    if root == "valid" and entry != "verify --source":  # the entry it holds is served
        assert got["code"] == 0, got
        return
    lines = [ln for ln in got["said"].splitlines() if ln.startswith("error:")]
    assert got["code"] == 2 and len(lines) == 1, got
    line = lines[0]
    assert f"{_named(entry)} cannot be written (" in line, line
    assert ".tmp-" not in line and ".verify-source-" not in line and ".packtool-owner" not in line, line
    need = ("verify --source re-tokenizes" if entry == "verify --source" else
            "is damaged" if root == "damaged" else "holds no entry for these inputs")
    assert need in line, line
    if root == "damaged" and entry != "verify --source":
        assert "cannot be rebuilt there" in line, line
    assert "rebuilding" not in got["said"], got["said"]
    assert ("set PACKTOOL_CACHE_DIR to another folder" if entry == "PACKTOOL_CACHE_DIR" else
            "give another") in line, line
    assert not got["output"], got
