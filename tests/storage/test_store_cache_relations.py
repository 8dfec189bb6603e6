"""One rule for where a tokenized cache root and an output may lie, folders and store prefixes
alike (S43-8): a `--cache-dir` that is a packed output, lies inside one or inside a cache entry,
or holds the input, and an `--output` inside the cache or holding it, are refused before any
work with one line naming the flag (exit 2, no traceback), and nothing packtool writes (a cache
entry, a shard) appears. Locally these were refused already; on a store the cache root's own
checks were skipped and its entries landed inside a packed output."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from conftest import GPT2, PEPS

from packtool.storage import locate

ARGS = ["--tokenizer", GPT2, "--max-tokens", "1024", "--overflow", "split", "--no-progress"]
ENTRY = "ENTRY"  # stands for the cache entry's key, found after the first pack

# case: (the --output, the --cache-dir, the flag the refusal names); P: a packed output, C: a
# cache root holding one entry, IN: a folder / prefix holding the input, NEW: nothing yet
CASES = {
    "cache inside a packed output": ("NEW/out", "P/cache", "--cache-dir"),
    "cache is a packed output": ("NEW/out", "P", "--cache-dir"),
    "cache inside a cache entry": ("NEW/out", f"C/{ENTRY}/x", "--cache-dir"),
    "cache holds the input": ("NEW/out", "IN", "--cache-dir"),
    "output inside the cache": ("C/out", "C", "--output"),
    "output holds the cache": ("NEW/out", "NEW/out/cache", "--output"),
}


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "packtool", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})


def _written(root: str) -> list[str]:
    """Every object / file under `root`, not counting empty folder markers (a store's write
    probe leaves one where pyarrow deletes its probe object)."""
    if root.startswith("s3://"):
        return sorted(i.path for i in locate(root).list() if i.type.name == "File")
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)


@pytest.mark.parametrize("kind", ["folder", "store"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_cache_root_and_an_output_follow_one_rule(kind, case, s3, tmp_path):
    root = s3 if kind == "store" else str(tmp_path / "root")
    j = (lambda *p: "/".join([root, *p]))
    if kind == "folder":
        os.makedirs(j("IN"))
        shutil.copy(PEPS, j("IN", "peps.jsonl.gz"))
    else:
        locate(j("IN", "peps.jsonl.gz")).write_bytes(open(PEPS, "rb").read())
    src = j("IN", "peps.jsonl.gz")
    first = _cli("pack", src, *ARGS, "-o", j("P"), "--cache-dir", j("C"))
    assert first.returncode == 0, first.stderr
    entry = next(p.rsplit("/", 2)[-2] for p in _written(j("C")) if p.endswith("/cache.json"))
    out, cache, flag = CASES[case]
    out, cache = j(out), j(cache.replace(ENTRY, entry))
    before = _written(root)
    r = _cli("pack", src, *ARGS, "-o", out, "--cache-dir", cache)
    assert r.returncode == 2, r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and flag in errors[0] and "Traceback" not in r.stderr, r.stderr
    assert _written(root) == before  # no entry, no shard, no lease
