"""A tokenized cache root that IS a packtool temporary folder (S33-1's rule at depth 0):
refused when another run made it (that run, or the next run's sweep, removes it with every
entry in it), on every entry that takes a cache root; allowed only when this very process made
it (verify --source's own cache, made by source_store: tokenize.cache_root.check_cache_dir)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.errors import PacktoolCacheError

runner = CliRunner()
PACK = ["pack", "toks.jsonl", "-C", "64", "--no-progress", "-q"]
TEMP = ".verify-source-1-abcdefgh"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def proj(tmp_path, monkeypatch):
    with open(tmp_path / "toks.jsonl", "w") as f:
        for i in range(20):
            f.write(json.dumps({"input_ids": list(range(1, 8 + i % 5))}) + "\n")
    monkeypatch.chdir(tmp_path)
    assert runner.invoke(app, [*PACK, "--cache-dir", "cache", "-o", "packed"]).exit_code == 0
    os.mkdir(TEMP)  # a killed run's: its marker names a process that is gone
    code = f"from packtool.output.leftovers import mark; mark({TEMP!r})"
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ, PYTHONPATH=REPO))
    return tmp_path


def _cli(args):
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and r.stderr.count("error:") == 1, r.stdout + r.stderr
    return r.stderr


def _library_pack():
    from packtool.align import Alignment
    from packtool.packing import pack
    from packtool.planning.core import PackingConfig
    from packtool.tokenize.config import TokenizeConfig
    pack(["toks.jsonl"], Alignment(capacity=64), PackingConfig(), TokenizeConfig(), output="lib", cache_dir=TEMP)


def _library_tokenize():
    from packtool.tokenize import tokenize_to_cache
    from packtool.tokenize.config import TokenizeConfig
    tokenize_to_cache(["toks.jsonl"], TokenizeConfig(), cache_dir=TEMP)


ENTRIES = {
    "pack": lambda: _cli([*PACK, "--cache-dir", TEMP, "--dry-run"]),
    "verify --source": lambda: _cli(["verify", "packed", "--source", "toks.jsonl", "--cache-dir", TEMP]),
    "library pack": lambda: _raised(_library_pack),
    "tokenize_to_cache": lambda: _raised(_library_tokenize),
}


def _raised(call):
    with pytest.raises(PacktoolCacheError) as e:
        call()
    return str(e.value)


@pytest.mark.parametrize("entry", list(ENTRIES))
def test_another_runs_temporary_as_the_cache_root_is_refused(proj, entry):
    said = ENTRIES[entry]()
    assert "is a packtool temporary folder" in said and TEMP in said, said
    assert sorted(os.listdir(proj / TEMP)) == [".packtool-owner"]  # nothing written, nothing removed


def test_this_process_s_own_temporary_is_verify_sources_cache(proj):
    from packtool.output.leftovers import owned_temp_dir
    from packtool.tokenize.cache_root import check_cache_dir
    mine = owned_temp_dir(".verify-source-x-", str(proj))
    assert check_cache_dir(mine) == os.path.realpath(mine)
    with pytest.raises(PacktoolCacheError, match="is inside a packtool temporary folder"):
        check_cache_dir(os.path.join(mine, "c"))
