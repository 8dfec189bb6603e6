"""Arrow's allocator is chosen once, when pyarrow loads: packtool asks for jemalloc in
`packtool/__init__.py`, which every entry runs before any of its modules imports pyarrow
(issue 23 class 8: the command used to import pyarrow before the switch in packing.py).
It also has a background thread of that jemalloc hand freed pages back after 0.1 s: by default
they stayed resident for 1 s, and in an arena no thread used again until the end (a raw chat
pack's write peaked 20-45 MiB higher for it), and `release_unused()` purged nothing."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENTRIES = {
    "the packtool command": "from packtool.cli import main",
    "python -m packtool": "import packtool.cli.app",
    "the library": "import packtool; packtool.pack",
    "packing": "import packtool.packing",
    "verify": "import packtool.verification.run",
    "the slab reader": "import packtool.slabs.reader",
    "packtool.online": "import packtool.online",
    "tokenize": "from packtool.tokenize import tokenize_to_cache",
}
POOL = "; import pyarrow as pa; print(pa.default_memory_pool().backend_name)"
# after POOL: MiB of resident anonymous memory given back within 1.5 s when a writer thread
# frees 64 MiB of Arrow buffers it filled (a shard writer's row groups) and waits
FREED = r"""
import threading
import time
import numpy as np
def anon():
    with open("/proc/self/statm") as f:
        fields = f.read().split()
    return (int(fields[1]) - int(fields[2])) * 4096 >> 20
def write(out):
    bufs = [pa.allocate_buffer(1 << 20) for _ in range(64)]
    for b in bufs:
        np.frombuffer(b, np.uint8)[:] = 1
    out.append(anon())
    del bufs, b
    done.wait()  # a pool's writer waits for work: its arena is not used again meanwhile
out, done = [], threading.Event()
t = threading.Thread(target=write, args=(out,))
t.start()
time.sleep(1.5)
print(out[0] - anon())
done.set()
t.join()
"""


def _run(code: str, env: dict) -> list[str]:
    e = {k: v for k, v in os.environ.items() if k not in ("ARROW_DEFAULT_MEMORY_POOL", "JE_ARROW_MALLOC_CONF")}
    e.update(env, PYTHONPATH=ROOT)
    got = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True)
    assert got.returncode == 0, got.stderr
    return got.stdout.strip().splitlines()


def _pool(code: str, **env) -> str:
    return _run(code + POOL, env)[-1]


def _pool_and_freed(code: str, **env) -> tuple[str, int]:
    """The entry's Arrow pool, and the MiB its freed buffers gave back."""
    *_, pool, freed = _run(code + POOL + "\n" + FREED, env)
    return pool, int(freed)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="packtool asks for jemalloc on Linux only")
class TestArrowPoolOnEveryEntry:
    @pytest.mark.parametrize("entry", sorted(ENTRIES))
    def test_jemalloc_that_gives_freed_pages_back(self, entry):
        pool, freed = _pool_and_freed(ENTRIES[entry])
        assert pool == "jemalloc" and freed > 48, (pool, freed)

    def test_the_users_jemalloc_settings_win(self):
        """The user's jemalloc settings are kept, and with them the pages (Arrow's own 1 s decay,
        no background thread: what every entry gave back before packtool's setting)."""
        pool, freed = _pool_and_freed(ENTRIES["the packtool command"],
                                      JE_ARROW_MALLOC_CONF="dirty_decay_ms:1000,muzzy_decay_ms:1000")
        assert pool == "jemalloc" and freed < 40, (pool, freed)

    def test_the_users_choice_wins(self):
        assert _pool(ENTRIES["the packtool command"], ARROW_DEFAULT_MEMORY_POOL="system") == "system"

    def test_a_caller_that_loaded_pyarrow_first_keeps_its_pool(self):
        assert _pool("import pyarrow; import packtool.packing") == "mimalloc"
