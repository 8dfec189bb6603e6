"""A `pack -o s3://...` killed while uploading shards or while deleting the replaced ones
(SIGKILL; SIGTERM while uploading): a reader of the manifest sees the old output or the new
one, whole and verifiable; the next run takes the dead run's lease at once (same host, process
gone), removes what the intent names and writes the same shard bytes."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import GPT2, PEPS

from packtool.slabs.format import SlabManifest
from packtool.slabs.names import MANIFEST
from packtool.storage import locate
from packtool.verification.run import verify

CHILD = r"""
import os, sys, time
stage, marker = os.environ["KILL_STAGE"], os.environ["KILL_MARKER"]
import packtool.output.store as m
def hold():
    open(marker, "w").close()
    time.sleep(8)
if stage == "upload":
    orig = m.upload_file
    def f(*a, **k):
        orig(*a, **k)
        hold()
    m.upload_file = f
else:  # the manifest is put; the replaced shards are not deleted yet
    m._is_ours = lambda *a, **k: hold()
sys.argv = ["packtool", *sys.argv[1:]]
from packtool.cli import main
main()
"""

ARGS = [PEPS, "--tokenizer", GPT2, "--max-tokens", "1024", "--overflow", "split", "--shard-tokens", "20000",
        "--no-progress"]


def _run(out, cache, *extra, env=None, check=True):
    r = subprocess.run([sys.executable, "-m", "packtool", "pack", *ARGS, "-o", out, "--cache-dir", cache, *extra],
                       capture_output=True, text=True, env=env)
    assert not check or r.returncode == 0, r.stderr
    return r


def _shard_bytes(out):
    m = SlabManifest.read(out)
    return [locate(m.shard_path(i)).read_bytes() for i in range(len(m.shards))]


@pytest.mark.parametrize("stage,sig", [("upload", signal.SIGKILL), ("clean", signal.SIGKILL),
                                       ("upload", signal.SIGTERM)])
def test_a_killed_store_pack_leaves_a_whole_output_and_the_rerun_the_same_bytes(s3, tmp_path, cache_dir, stage, sig):
    out = f"{s3}/k"
    _run(out, cache_dir)
    before_manifest, before = locate(out).join(MANIFEST).read_bytes(), _shard_bytes(out)
    marker = tmp_path / "held"
    sys_tmp = tmp_path / "tmp"  # the system temp folder, where a store output's shards are staged
    sys_tmp.mkdir()
    env = {**os.environ, "KILL_STAGE": stage, "KILL_MARKER": str(marker), "PYTHONPATH": os.getcwd(),
           "TMPDIR": str(sys_tmp)}
    p = subprocess.Popen([sys.executable, "-c", CHILD, "pack", *ARGS, "-o", out, "--cache-dir", cache_dir,
                          "--overwrite"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.time()
    while not marker.exists():
        assert p.poll() is None and time.time() - t0 < 120, p.communicate()
        time.sleep(0.1)
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    after = locate(out).join(MANIFEST).read_bytes()
    assert (after == before_manifest) == (stage == "upload")  # the commit is the manifest put
    rep = verify(out, workers=1)  # whole; the shards the dead run's intent names are what plain readers still meet
    assert all(p.check == "shard_extra" and "no longer running" in p.message for p in rep.problems), rep.problems
    assert bool(rep.problems) == (sig == signal.SIGKILL)
    from packtool.hf import SlabDataset
    assert len(SlabDataset(out)) > 0  # and every consumer opens it (they once refused the replaced shards)
    assert _shard_bytes(out) == before  # either manifest lists shards of these bytes
    if sig == signal.SIGTERM:  # unwound like Ctrl-C: its uploads, intent and lease are gone
        assert p.returncode == 128 + signal.SIGTERM and "terminated (SIGTERM)" in err, err
        assert verify(out, workers=1).ok and sorted(locate(out).names()) == sorted(
            [*SlabManifest.read(out).shards, MANIFEST])
    assert sig == signal.SIGTERM or [e for e in os.listdir(sys_tmp) if f"-{p.pid}-" in e], "nothing staged?"
    _run(out, cache_dir, "--overwrite", env={**os.environ, "TMPDIR": str(sys_tmp)})  # the dead run's lease taken over
    assert not [e for e in os.listdir(sys_tmp) if f"-{p.pid}-" in e], os.listdir(sys_tmp)  # its staging removed
    m = SlabManifest.read(out)
    assert sorted(locate(out).names()) == sorted([*m.shards, MANIFEST])
    assert _shard_bytes(out) == before and verify(out, workers=1).ok
