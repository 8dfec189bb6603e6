"""S47A-8: a tokenized cache entry given as the input (the folder `ls ~/.cache/packtool/tokenized`
shows, or its cache.json) was "cache.json: holds one JSON object ... not rows ... save the list
of rows inside it as such a file": a fix that has the user rewrite packtool's own record. It is
said as what it is (read_checks.one_object, where a lone JSON object is judged), as a packed
output given itself is."""
from __future__ import annotations

import os

import pytest
from conftest import GPT2, GSM8K
from typer.testing import CliRunner

import packtool
from packtool.tokenize import TokenizeConfig

runner = CliRunner()


@pytest.fixture(scope="module")
def entry(tmp_path_factory):
    from packtool.cli.app import app
    t = tmp_path_factory.mktemp("ce")
    with open(GSM8K) as f:
        (t / "a.jsonl").write_text("".join(f.readlines()[:5]))
    r = runner.invoke(app, ["pack", str(t / "a.jsonl"), "--tokenizer", GPT2, "-C", "1024", "--dry-run", "-q",
                            "--cache-dir", str(t / "c")])
    assert r.exit_code == 0, r.output
    (name,) = os.listdir(t / "c")
    return str(t / "c" / name)


@pytest.mark.parametrize("given", ["the entry", "its cache.json"])
@pytest.mark.parametrize("door", ["cli", "library"])
def test_a_cache_entry_given_is_said_as_one(entry, given, door, tmp_path):
    from packtool.cli.app import app
    spec = entry if given == "the entry" else os.path.join(entry, "cache.json")
    if door == "cli":
        r = runner.invoke(app, ["pack", spec, "--tokenizer", GPT2, "-C", "1024", "--dry-run", "-q",
                                "--cache-dir", str(tmp_path / "c2")])
        assert r.exit_code == 2, r.output
        said = r.stderr
    else:
        with pytest.raises(packtool.PacktoolError) as e:
            packtool.pack([spec], tokenize=TokenizeConfig(tokenizer=GPT2), dry_run=True, cache_dir=str(tmp_path / "c2"))
        said = str(e.value)
    assert "tokenized cache entry, not data" in said and "save the list of rows" not in said, said
