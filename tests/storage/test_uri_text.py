"""A store URI whose text Arrow refuses in its own words or reads as another key (issue 23,
S36-5) is one line naming the flag (the library argument) and the URI to give, before any work
or request: `s3://bkt//out2` was pyarrow's "Empty path component" (flag null, kind input),
`s3://bkt/a b` "cannot open the store ... this pyarrow may lack s3 support", `s3://bkt/%2e%2e/x`
passed every check and failed at the first write (key `../x`), `s3://BKT/x` was shown as
s3://bkt/x, `s3://bkt/a#b` wrote to s3://bkt/a. Over every kind x every argument taking a URI."""
from __future__ import annotations

import json

import pytest
from cli_main import run_main
from conftest import GPT2, GSM8K

import packtool
from packtool.errors import PacktoolError

# the URI typed -> (what the line says, the URI it says to give)
KINDS = {
    "empty-component": ("s3://bkt//out2", "an empty path component (//)", "s3://bkt/out2"),
    "space": ("s3://bkt/a b", "the character ' '", "s3://bkt/a%20b"),
    "encoded-dotdot": ("s3://bkt/%2e%2e/x", "a '..' path component", "s3://bkt/x"),
    "dotdot": ("s3://bkt/p/../x", "a '..' path component", "s3://bkt/p/x"),
    "dot": ("s3://bkt/./x", "a '.' path component", "s3://bkt/x"),
    "encoded-slashes": ("s3://bkt/a%2F%2Fb", "an empty path component (//)", "s3://bkt/a/b"),
    "upper-case-bucket": ("s3://BKT/x", "an upper-case bucket name", "s3://bkt/x"),
    "fragment": ("s3://bkt/a#b", "the character '#'", "s3://bkt/a%23b"),
    "bad-escape": ("s3://bkt/a%zz", "a % that starts no escape", "s3://bkt/a%25zz"),
    "non-ascii": ("gs://bkt/é", "the character 'é'", "gs://bkt/%C3%A9"),
}
# where a URI is given: the command line's flag, the library's argument
PLACES = {"output": "--output", "cache_dir": "--cache-dir", "inputs": "INPUTS"}


@pytest.fixture
def no_work(monkeypatch):
    import packtool.tokenize.pipeline as pl
    monkeypatch.setattr(pl, "_build", lambda *a, **k: pytest.fail("tokenized before the URI was checked"))


def _argv(tmp_path, place, uri):
    given = {"output": str(tmp_path / "out"), "cache_dir": str(tmp_path / "c"), "inputs": GSM8K, place: uri}
    return ["--json", "pack", given["inputs"], "--tokenizer", GPT2, "--prompt-field", "question",
            "--response-field", "answer", "--no-progress", "-o", given["output"], "--cache-dir", given["cache_dir"]]


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("kind", KINDS)
def test_the_command_line_names_the_flag_and_the_uri_to_give(tmp_path, monkeypatch, capsys, no_work, kind, place):
    uri, said, fixed = KINDS[kind]
    monkeypatch.chdir(tmp_path)
    assert run_main(monkeypatch, _argv(tmp_path, place, uri)) == [2]
    err = json.loads(capsys.readouterr().out)["error"]
    flag = PLACES[place]
    assert err["type"] == "StorageError" and (err["flag"] == flag or flag == "INPUTS"), err
    msg = err["message"]
    assert said in msg and f"refused in {flag}" in msg and f"give {flag} {fixed}" in msg, msg
    assert "\n" not in msg and "Arrow" not in msg
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing made


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("kind", KINDS)
def test_the_library_names_the_argument(tmp_path, monkeypatch, no_work, kind, place):
    uri, said, fixed = KINDS[kind]
    monkeypatch.chdir(tmp_path)
    kw = {"output": str(tmp_path / "out"), "cache_dir": str(tmp_path / "c"), "inputs": [GSM8K]}
    kw[place] = [uri] if place == "inputs" else uri
    with pytest.raises(PacktoolError) as e:
        packtool.pack(kw.pop("inputs"), **kw, tokenize=packtool.TokenizeConfig(
            tokenizer=GPT2, prompt_field="question", response_field="answer"))
    msg = str(e.value)
    assert said in msg and f"refused in {place}" in msg and f"give {place}={fixed!r}" in msg, msg
    assert getattr(e.value, "flag", None) is None


@pytest.mark.parametrize("uri", ["s3://bkt/out/", "s3://bkt/a%20b", "s3://bkt/data/**/*.jsonl",
                                 "s3://bkt/x%5B0-9%5D.jsonl", "s3://bkt/p?region=us-east-1", "hdfs://Host:9000/a"])
def test_uris_packtool_takes_pass_the_text_check(uri):
    from packtool.storage_uri import check_form, shown
    check_form(uri, "output")
    assert shown(uri).split("://")[1].split("/")[0] == uri.split("://")[1].split("/")[0].split("?")[0]
