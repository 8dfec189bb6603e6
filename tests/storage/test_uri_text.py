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
    "dotdot": ("s3://bkt/p/../x", "a '..' path component", "s3://bkt/x"),  # where a path goes, not p/x (S43-2)
    "dotdot-deeper": ("s3://bkt/a/b/../../c/./d/e/..", "a '..' path component", "s3://bkt/c/d"),
    "dotdot-encoded-deeper": ("s3://bkt/a/%2E%2E/b/%2e/c", "a '..' path component", "s3://bkt/b/c"),
    "dot": ("s3://bkt/./x", "a '.' path component", "s3://bkt/x"),
    "encoded-slashes": ("s3://bkt/a%2F%2Fb", "an empty path component (//)", "s3://bkt/a/b"),
    "upper-case-bucket": ("s3://BKT/x", "an upper-case bucket name", "s3://bkt/x"),
    "fragment": ("s3://bkt/a#b", "the character '#'", "s3://bkt/a%23b"),
    "bad-escape": ("s3://bkt/a%zz", "a % that starts no escape", "s3://bkt/a%25zz"),
    "non-ascii": ("gs://bkt/é", "the character 'é'", "gs://bkt/%C3%A9"),
    # a query Arrow refuses ("cannot open the store") or reads otherwise than typed, a fragment it drops
    "query-unknown-key": ("s3://bkt/a?x=1", "the query parameter 'x'", "s3://bkt/a"),
    "query-key-twice": ("s3://bkt/a?region=us-east-1&region=eu-west-1", "the query parameter 'region' given twice",
                        "s3://bkt/a?region=us-east-1"),
    "query-no-value": ("gs://bkt/a?project_id=", "the query parameter 'project_id' without a value", "gs://bkt/a"),
    "fragment-after-query": ("s3://bkt/a?region=us-east-1#frag", "a fragment ('#frag')",
                             "s3://bkt/a?region=us-east-1"),
    # Azure's container names: lower case, 3-63 letters, digits, single '-' (in each place Arrow reads one)
    "upper-case-container": ("abfs://Data@acct.dfs.core.windows.net/x", "an upper-case container name",
                             "abfs://data@acct.dfs.core.windows.net/x"),
    "upper-case-container-in-path": ("abfs://acct.blob.core.windows.net/Data/x", "an upper-case container name",
                                     "abfs://acct.blob.core.windows.net/data/x"),
    "short-container": ("abfs://acct@ab/x", "the container name 'ab'", "abfs://acct@CONTAINER/x"),
    "container-odd-character": ("abfss://a_b@acct.dfs.core.windows.net/x", "the container name 'a_b'",
                                "abfss://CONTAINER@acct.dfs.core.windows.net/x"),
}
# where a URI is given: the command line's flag, the library's argument
PLACES = {"output": "--output", "cache_dir": "--cache-dir", "inputs": "INPUTS"}
# the class of a refusal there: the argument's kind's (errors.argument_kind, storage.store_error)
TYPE = {"output": "StorageOutputError", "cache_dir": "StorageCacheError", "inputs": "StorageError"}


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
    assert err["type"] == TYPE[place] and (err["flag"] == flag or flag == "INPUTS"), err
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
    assert type(e.value).__name__ == TYPE[place]  # the argument's kind: `except PacktoolOutputError` catches -o's


@pytest.mark.parametrize("uri", ["s3://bkt/out/", "s3://bkt/a%20b", "s3://bkt/data/**/*.jsonl",
                                 "s3://bkt/x%5B0-9%5D.jsonl", "s3://bkt/p?region=us-east-1", "hdfs://Host:9000/a",
                                 "s3://bkt/p?region=us-east-1&endpoint_override=localhost:9000",
                                 "gs://bkt/p?project_id=p1", "hdfs://h:9000/a?dfs.replication=2",
                                 "abfs://data@acct.dfs.core.windows.net/x", "abfss://acct.blob.core.windows.net/my-data/x",
                                 "abfs://acct@127.0.0.1:10000/data-1/x?enable_tls=false", "abfs://acct@$root/x"])
def test_uris_packtool_takes_pass_the_text_check(uri):
    from packtool.storage import check_form, shown
    check_form(uri, "output")
    assert shown(uri).split("://")[1].split("/")[0] == uri.split("://")[1].split("/")[0].split("?")[0]


def test_the_query_keys_said_are_those_this_arrow_takes():
    """storage.uri.QUERY_KEYS (checked without pyarrow) against the installed pyarrow's own
    FileSystem.from_uri: each key is one it takes (a region given: no request is made)."""
    import pyarrow.fs as pafs

    from packtool.storage import QUERY_KEYS
    base = {"s3": "s3://bkt/k?region=us-east-1&", "gs": "gs://bkt/k?", "gcs": "gs://bkt/k?",
            "abfs": "abfs://data@acct.dfs.core.windows.net/k?", "abfss": "abfs://data@acct.dfs.core.windows.net/k?"}
    for scheme, keys in QUERY_KEYS.items():
        for key in keys:
            try:
                pafs.FileSystem.from_uri(f"{base[scheme]}{key}=1")
            except Exception as e:  # a value it cannot use is no refusal of the key
                assert "query parameter" not in str(e), (scheme, key, str(e))
        with pytest.raises(Exception, match="query parameter"):
            pafs.FileSystem.from_uri(f"{base[scheme]}not_a_key=1")
