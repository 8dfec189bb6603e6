"""S47A-16: under an address-space limit (`ulimit -v 1000000`) a 20 MB JSON Lines or JSON array
pack died in the tokenizer's native code, varying run to run: a Rust allocation abort (exit 134),
a rayon pool panic with a traceback (exit 1), "can't start new thread" (exit 3). glibc reserved
64 MiB of address space per thread arena (~690 MiB for ~300 MiB resident). Every entry caps the
arenas where such a limit is set (packtool/malloc_arenas.py): the same pack ends, rc 0."""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

import pytest

from conftest import GPT2
from packtool import malloc_arenas

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIMIT = 1_000_000 * 1024  # ulimit -v 1000000, as the finding ran it


def _limited():
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, resource.getrlimit(resource.RLIMIT_AS)[1]))


@pytest.mark.parametrize("kind", ["jsonl", "json"])
def test_a_pack_under_an_address_space_limit_ends(tmp_path, kind):
    row = json.dumps({"text": "word " * 200})
    p = tmp_path / f"rows.{kind}"
    p.write_text("\n".join([row] * 20000) + "\n" if kind == "jsonl" else "[" + ",".join([row] * 20000) + "]")
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    env["PYTHONPATH"] = ROOT
    for _ in range(2):  # it varied run to run
        r = subprocess.run([sys.executable, "-m", "packtool", "pack", str(p), "--tokenizer", GPT2, "-C", "2048",
                            "--dry-run", "-q", "--cache-dir", str(tmp_path / "c"), "--no-progress"],
                           env=env, cwd=tmp_path, preexec_fn=_limited, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
        assert "Traceback" not in r.stderr and "panicked" not in r.stderr


@pytest.mark.parametrize("limit, cores, want", [(LIMIT, 2, 2), (LIMIT, 64, 2), (4 << 30, 2, 8), (64 << 30, 2, 16),
                                               (64 << 30, 64, 128), (1 << 20, 1, 2)])
def test_arenas_take_at_most_an_eighth_of_the_limit(limit, cores, want):
    assert malloc_arenas.arenas_for(limit, cores) == want


def test_no_limit_or_the_users_setting_leaves_malloc_alone(monkeypatch):
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert malloc_arenas.cap_arenas() is None
    monkeypatch.delenv("MALLOC_ARENA_MAX")
    if all(resource.getrlimit(r)[0] == resource.RLIM_INFINITY for r in (resource.RLIMIT_AS, resource.RLIMIT_DATA)):
        assert malloc_arenas.cap_arenas() is None
