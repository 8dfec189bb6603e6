"""A row refused as too long for the memory left (tokenize.long_rows, S35-10) is named by its
file and row (from 0) in every path that tokenizes in-process: `pack` and `verify --source`
(the line in the error contract's `FILE, row N:` form, `path` and `row` in --json) and the
library's pack (the error's .path/.row), wherever the row is: a later file, a later chunk
(S36-8). The memory limit is stood in for: `room` reports little left and the probe child says
only the long row ran out (the real abort is tests/tokenize/test_long_row_refused.py's)."""
from __future__ import annotations

import json

import pytest
from conftest import GPT2, LONG_ROW, long_row_inputs as _inputs
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.tokenize import long_rows, pipeline

LONG = LONG_ROW



def _pack_cli(tmp_path, paths):
    r = CliRunner().invoke(app, ["pack", *paths, "--tokenizer", GPT2, "-C", "8192", "--overflow", "split", "--json",
                                 "--no-progress", "-o", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "c")])
    return r.exit_code, r.output


def _verify_source(tmp_path, paths):
    r = CliRunner().invoke(app, ["verify", str(tmp_path / "packed"), "--source", *paths, "--json",
                                 "--cache-dir", str(tmp_path / "c2")])
    return r.exit_code, r.output


def _library(tmp_path, paths):
    from packtool import TokenizeConfig, pack
    with pytest.raises(long_rows.RowTooLongError) as e:
        pack(paths, tokenize=TokenizeConfig(tokenizer=GPT2), dry_run=True, cache_dir=str(tmp_path / "c3"))
    return e.value


RUNS = {"pack": _pack_cli, "verify --source": _verify_source, "library pack": _library}


@pytest.mark.parametrize("chunk", [1 << 20, 300], ids=["one chunk", "many chunks"])
@pytest.mark.parametrize("where", ["a", "b"])
@pytest.mark.parametrize("run", RUNS)
def test_a_row_too_long_for_memory_is_named_by_file_and_row(tmp_path, monkeypatch, run, where, chunk):
    paths = _inputs(tmp_path, where)
    if run == "verify --source":  # an output of these rows, packed where memory is not tight
        r = CliRunner().invoke(app, ["pack", *paths, "--tokenizer", GPT2, "-C", "8192", "--overflow", "split",
                                     "-q", "-o", str(tmp_path / "packed"), "--cache-dir", str(tmp_path / "c")])
        assert r.exit_code == 0, r.output
    monkeypatch.setattr(long_rows, "room", lambda: (20_000, "the address-space limit (ulimit -v)"))
    monkeypatch.setattr(long_rows, "_encodes_in_child", lambda tok, text, fast: len(text) < LONG)
    monkeypatch.setattr(pipeline, "_CHUNK_CHARS", chunk)
    path = paths[0 if where == "a" else 1]
    if run == "library pack":
        e = _library(tmp_path, paths)
        assert (e.path, e.row) == (path, 2), (e.path, e.row, str(e))
        return
    code, out = RUNS[run](tmp_path, paths)
    err = json.loads(out.strip().splitlines()[-1])["error"]
    assert (code, err["kind"]) == (2, "resources"), out
    assert (err["path"], err["row"]) == (path, 2), err
    assert err["message"].startswith(f"{path}, row 2: out of memory") and "(rows count from 0)" in err["message"]
