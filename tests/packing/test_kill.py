"""A pack killed the way schedulers kill (SIGKILL, SIGTERM) while tokenizing, planning or
writing: the previous output stays byte-identical, a SIGTERM'd run removes its own temporary
files, and the next run removes what a SIGKILL'd one left, then succeeds; nothing is left
beside the output or in the cache.

The child is `python -m packtool pack` with one stage held open for a few seconds (a
wrapper around a packtool function in the child only), so the signal lands in that stage
every time."""
from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import GPT2, TASKMASTER

from packtool.align import Alignment
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig
from packtool.verification.run import verify

CHILD = r"""
import os, sys, time
stage, marker = os.environ["KILL_STAGE"], os.environ["KILL_MARKER"]
held = []
def hold():
    if not held:
        held.append(1)
        open(marker, "w").close()
        time.sleep(6)
if stage == "tokenize":
    import packtool.tokenize.pipeline as m
    orig = m._encode_chunk
    def f(*a, **k):
        hold()
        return orig(*a, **k)
    m._encode_chunk = f
elif stage == "plan":
    import packtool.planning.spill as m
    orig = m.plan_spilled
    def f(*a, **k):
        r = orig(*a, **k)
        hold()
        return r
    m.plan_spilled = f
elif stage == "write":
    import packtool.packing as m
    orig = m.write_manifest
    def f(*a, **k):
        hold()
        return orig(*a, **k)
    m.write_manifest = f
sys.argv = ["packtool", *sys.argv[1:]]
from packtool.cli import main
main()
"""

TEMP_MARKS = ("packtool-tmp", "packtool-spill", ".packtool.lock", ".tmp-", "flat.tmp")


def _files(d) -> dict[str, bytes]:
    return {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d))}


def _leftovers(*roots) -> list[str]:
    found = []
    for root in roots:
        for d, dirs, files in os.walk(root):
            found += [os.path.join(d, x) for x in dirs + files if any(m in x for m in TEMP_MARKS)]
    return found


@pytest.fixture
def setup(tmp_path):
    data = tmp_path / "chats.jsonl"
    data.write_text(gzip.open(TASKMASTER, "rt").read() * 3)
    work, cache = tmp_path / "work", tmp_path / "cache"
    out = work / "out"
    tok = TokenizeConfig(tokenizer=GPT2, chat_template="chatml")
    pack([str(data)], Alignment(capacity=1024), PackingConfig("bfd", overflow="split"), tok,
         output=str(out), cache_dir=str(tmp_path / "cache-prev"))
    return data, work, cache, out, tok


@pytest.mark.parametrize("stage", ["tokenize", "plan", "write"])
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killed_pack_leaves_previous_output_and_no_temp(setup, tmp_path, capfd, stage, sig):
    data, work, cache, out, tok = setup
    before = _files(out)
    marker = tmp_path / "marker"
    env = dict(os.environ, KILL_STAGE=stage, KILL_MARKER=str(marker))
    args = [str(data), "--tokenizer", GPT2, "--chat-template", "chatml", "-C", "512", "--overflow", "split",
            "-o", str(out), "--overwrite", "--cache-dir", str(cache), "--no-progress", "--workers", "1"]
    child = subprocess.Popen([sys.executable, "-c", CHILD, "pack", *args], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not marker.exists():
        assert child.poll() is None, child.communicate()
        time.sleep(0.005)
    child.send_signal(sig)
    _, err = child.communicate(timeout=300)
    assert "Traceback" not in err, err
    if sig == signal.SIGTERM:
        assert child.returncode == 128 + signal.SIGTERM, err
        assert "terminated (SIGTERM)" in err
        assert _leftovers(work, cache) == []  # cleaned by the run itself
    else:
        assert child.returncode == -signal.SIGKILL
        assert _leftovers(work, cache) != []  # what the next run has to clean
    assert _files(out) == before
    capfd.readouterr()
    res = pack([str(data)], Alignment(capacity=512), PackingConfig("bfd", overflow="split"), tok,
               output=str(out), overwrite=True, cache_dir=str(cache), workers=1)
    said = capfd.readouterr().err
    if sig == signal.SIGKILL:
        assert "temporary folder(s) left by packtool runs that were killed" in said
    assert res.output == str(out) and verify(str(out), workers=1).ok
    assert _files(out) != before
    assert sorted(os.listdir(work)) == ["out"]
    assert _leftovers(work, cache) == []
