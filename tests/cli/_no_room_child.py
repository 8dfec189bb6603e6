"""The child of tests/cli/test_write_no_room.py: packtool command lines run in this one process
(typer's CliRunner) under a file size limit (RLIMIT_FSIZE, what `ulimit -f` sets), each case
with its own limit, so that a real write on each write path fails with EFBIG as a full or
quota-limited disk fails it. The limit is a process's own: a pytest worker under it would keep
it in every pool it starts, so the cases run here, in one process for all of them.

Usage: python _no_room_child.py FOLDER; prints one JSON object per case: the exit status, the
--json error, and what the failed run left in FOLDER that was not there before it.
"""
from __future__ import annotations

import json
import os
import random
import resource
import sys

import numpy as np
from typer.testing import CliRunner

from packtool.cli.app import app

ROWS, TOKENS = 400, 250  # ~100k token ids: cache files and a slab far past the limits below


def _setup(t: str) -> dict:
    rng = random.Random(0)
    with open(os.path.join(t, "rows.jsonl"), "w") as f:
        for _ in range(ROWS):
            f.write(json.dumps({"input_ids": [rng.randrange(50000) for _ in range(TOKENS)]}) + "\n")
    np.save(os.path.join(t, "l.npy"), np.array([rng.randrange(1, 1000) for _ in range(5000)]))
    warm = CliRunner().invoke(app, ["pack", os.path.join(t, "rows.jsonl"), "-C", "1024", "--dry-run", "-q",
                                    "--cache-dir", os.path.join(t, "warm")])
    assert warm.exit_code == 0, warm.output
    rows, lengths = os.path.join(t, "rows.jsonl"), os.path.join(t, "l.npy")
    # case -> (argv, the file size limit in bytes, HOME)
    return {
        "pack: the cache under --cache-dir": (["pack", rows, "-C", "1024", "-q", "--cache-dir",
                                               os.path.join(t, "c1"), "-o", os.path.join(t, "o1")], 64 << 10, None),
        "pack: the default cache": (["pack", rows, "-C", "1024", "-q", "-o", os.path.join(t, "o2")], 64 << 10,
                                    os.path.join(t, "home")),
        "pack: the slabs beside -o": (["pack", rows, "-C", "1024", "-q", "--cache-dir", os.path.join(t, "warm"),
                                       "-o", os.path.join(t, "o3")], 64 << 10, None),
        "plan: -o": (["plan", "--lengths", lengths, "-C", "1024", "-o", os.path.join(t, "p.parquet")], 4 << 10, None),
        "inspect: --html": (["inspect", "--lengths", lengths, "-C", "1024", "--html", os.path.join(t, "r.html")],
                            4 << 10, None),
    }


def _tree(t: str) -> set[str]:
    return {os.path.join(d, n) for d, ds, fs in os.walk(t) for n in ds + fs}


def main(t: str) -> None:
    os.makedirs(os.path.join(t, "home"))
    cases = _setup(t)
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    for name, (argv, limit, home) in cases.items():
        before = _tree(t)
        os.environ["HOME"] = home or os.path.join(t, "home")
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
        try:
            r = CliRunner().invoke(app, [argv[0], "--json", *argv[1:]])
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
        lines = r.stdout.strip().splitlines()
        print(json.dumps({"case": name, "code": r.exit_code, "error": json.loads(lines[-1]).get("error") if lines
                          else None, "stderr": r.stderr, "left": sorted(_tree(t) - before)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
