"""A push of a tokenized-cache entry to a store killed (SIGKILL) before its cache.json went up
leaves a partial entry, never used (L2): the next run with a cache on that store removes what the
dead push provably put (the files its marker or its tasks' proofs name, still that size and
checksum), its marker and proofs, says how many it removed, and keeps anything else there,
said. Every writer of an entry: the local engine's push, its push replacing a damaged entry,
the Ray engine's build (its tasks upload the parts)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from conftest import GPT2, GSM8K, PEPS, ray_grouped

from packtool.storage import locate
from packtool.tokenize.store_cache import ENTRY_META

CHILD = r"""
import os, signal, sys
how = os.environ["KILL_AT"]
if how == "upload":  # the local engine's push: killed once two of the entry's files are up
    import packtool.tokenize.store_cache as m
    orig, done = m.upload, []
    def f(src, dst):
        orig(src, dst)
        done.append(1)
        if len(done) == 2:
            os.kill(os.getpid(), signal.SIGKILL)
    m.upload = f
else:  # the Ray engine's build: every part is up, its cache.json not yet
    import packtool.engines.ray_cache as rc
    rc.commit_entry = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
sys.argv = ["packtool", *sys.argv[1:]]
from packtool.cli import main
main()
"""

ARGS = ["--tokenizer", GPT2, "--max-tokens", "1024", "--overflow", "split", "--shard-tokens", "20000", "--no-progress"]


def _pack(inp, out, cache, *extra, kill=None, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "PACKTOOL_CACHE_DIR": str(tmp_path / f"mirror-{out[-2:]}")}
    cmd = [sys.executable, "-m", "packtool", "pack", inp, *ARGS, "-o", out, "--cache-dir", cache, *extra]
    if not kill:
        return subprocess.run(cmd, capture_output=True, text=True, env=env)
    env["KILL_AT"] = kill
    cmd = [sys.executable, "-c", CHILD, "pack", inp, *ARGS, "-o", out, "--cache-dir", cache, *extra]
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                             start_new_session=True)
    try:
        stdout, stderr = child.communicate(timeout=600)
    finally:
        _end_session(child.pid)  # a killed driver's local Ray processes outlive it otherwise
    return subprocess.CompletedProcess(cmd, child.returncode, stdout, stderr)


def _end_session(sid: int) -> None:
    """SIGKILL what is left of the child's session (setsid at its start: only its descendants)."""
    for d in os.listdir("/proc"):
        try:
            if d.isdigit() and os.getsid(int(d)) == sid:
                os.kill(int(d), signal.SIGKILL)
        except OSError:
            continue


def _objects(root: str) -> dict[str, bytes]:
    loc = locate(root)
    return {i.path[len(loc.path) + 1:]: loc.join(i.path[len(loc.path) + 1:]).read_bytes() for i in loc.list()}


WRITERS = ["local push", "local push replacing a damaged entry", "ray build"]


@pytest.mark.parametrize("writer", ray_grouped(WRITERS))
def test_a_killed_push_leaves_nothing_the_next_run_does_not_remove(s3, tmp_path, writer):
    if writer == "ray build":
        pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'packtool[ray]')")
    cache = f"{s3}/cache"
    if writer.endswith("damaged entry"):
        assert _pack(PEPS, f"{s3}/o0", cache, tmp_path=tmp_path).returncode == 0
        part = next(n for n in _objects(cache) if n.endswith(".parquet"))
        data = bytearray(locate(cache).join(part).read_bytes())
        data[len(data) // 2] ^= 0xFF
        locate(cache).join(part).write_bytes(bytes(data))
    engine = ["--engine", "ray"] if writer == "ray build" else []
    r = _pack(PEPS, f"{s3}/o1", cache, *engine, kill="commit" if engine else "upload", tmp_path=tmp_path)
    assert r.returncode == -9, r.stderr
    left = _objects(cache)
    (key,) = {n.split("/")[0] for n in left if not n.startswith(".")}
    assert not any(n.endswith("/" + ENTRY_META) for n in left), "the killed push committed"
    assert any(n.startswith(".packtool-push-") for n in left)
    pushed = [n for n in left if n.startswith(key + "/") and not n.split("/")[-1].startswith(".packtool-proof-")]
    assert pushed
    # not the push's: an object a user put there, and one of its files changed since
    locate(cache).join(key, "notes.txt").write_bytes(b"mine")
    changed = pushed[0]
    locate(cache).join(changed).write_bytes(b"changed since the push")

    r = _pack(GSM8K, f"{s3}/o2", cache, "--prompt-field", "question", "--response-field", "answer",
              tmp_path=tmp_path)  # another entry: only the sweep touches the partial one
    assert r.returncode == 0, r.stderr
    assert f"removed {len(pushed) - 1} file(s) of 1 partial tokenized-cache entry" in r.stderr, r.stderr
    assert "kept 2 object(s)" in r.stderr and "notes.txt" in r.stderr, r.stderr
    now = _objects(cache)
    assert {n for n in now if n.startswith(key + "/")} == {f"{key}/notes.txt", changed}
    assert not any(n.startswith(".packtool-push-") or "/.packtool-proof-" in n for n in now), sorted(now)
    entries = {n.split("/")[0] for n in now if n.endswith("/" + ENTRY_META)}
    assert len(entries) == 1 and key not in entries  # the second run's, committed
