"""Arrow's allocator is chosen once, when pyarrow loads: packtool asks for jemalloc in
`packtool/__init__.py`, which every entry runs before any of its modules imports pyarrow
(issue 23 class 8: the command used to import pyarrow before the switch in packing.py)."""
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


def _pool(code: str, **env) -> str:
    e = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    e.update(env, PYTHONPATH=ROOT)
    got = subprocess.run([sys.executable, "-c", code + POOL], env=e, capture_output=True, text=True)
    assert got.returncode == 0, got.stderr
    return got.stdout.strip().splitlines()[-1]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="packtool asks for jemalloc on Linux only")
class TestArrowPoolOnEveryEntry:
    @pytest.mark.parametrize("entry", sorted(ENTRIES))
    def test_jemalloc(self, entry):
        assert _pool(ENTRIES[entry]) == "jemalloc"

    def test_the_users_choice_wins(self):
        assert _pool(ENTRIES["the packtool command"], ARROW_DEFAULT_MEMORY_POOL="system") == "system"

    def test_a_caller_that_loaded_pyarrow_first_keeps_its_pool(self):
        assert _pool("import pyarrow; import packtool.packing") == "mimalloc"
