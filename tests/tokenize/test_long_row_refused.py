"""S35-10: one row the tokenizer cannot hold under a memory limit aborted the process (a Rust
allocation failure: exit 134, a 20-line backtrace, no `error:` line, a lock and a cache
temporary left). A row long enough to be in doubt is encoded once in a forked child first; a
row whose child ran out is refused with one line (the README's out-of-memory line, kind
`resources`, here with the row's size and the limit) and the process lives on; a row that fits
is encoded as before. Both encode calls (with offsets for spans, and the fast one) are covered.
The limit is set in a child process (_long_row_child.py): an abort is the thing tested."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import GPT2

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


@pytest.fixture(scope="module")
def runs() -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, os.path.join(HERE, "_long_row_child.py"), GPT2], capture_output=True,
                       text=True, env=env, timeout=300)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])  # -6: the tokenizer's abort
    return {d["case"]: d for d in map(json.loads, r.stdout.splitlines())}


@pytest.mark.parametrize("spans", [False, True])
def test_a_row_the_tokenizer_cannot_hold_is_refused_not_aborted(runs, spans):
    said = runs[f"too long, spans={spans}"]["refused"]
    assert said and "48.0 MiB" in said and "ulimit -v" in said and "split or shorten that row" in said, said


@pytest.mark.parametrize("spans", [False, True])
def test_a_row_in_doubt_that_fits_is_encoded_as_before(runs, spans):
    run = runs[f"fits, probed, spans={spans}"]
    assert run["same"] and run["probes"] == 2, run


def test_the_refusal_is_the_out_of_memory_line(monkeypatch):
    import packtool.cli.failure as failure
    from packtool.tokenize.long_rows import RowTooLongError
    monkeypatch.setitem(failure._STATE, "args", {"inputs": ["big.json"]})
    monkeypatch.setitem(failure._STATE, "running", "pack")
    try:
        raise RowTooLongError("a row of 300.0 MiB of text cannot be tokenized within the address-space limit")
    except RowTooLongError as e:
        kind, line, code = failure.describe(e)
    assert (kind, code) == ("resources", 2), line
    assert line.startswith("out of memory in `packtool pack`") and "big.json" in line and "300.0 MiB" in line, line
