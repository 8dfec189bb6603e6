"""A store object whose key holds an empty path component (`data2//b.jsonl`: what
`f"{prefix}/{name}"` writes for a prefix ending in `/`) cannot be addressed through pyarrow (a
URI's `//` is refused, and Arrow reads `data2/b.jsonl`, another key). Every door that lists it
refused it naming a key that is not there ("Path does not exist 'data2/b.jsonl'"), or, a glob,
left its rows out without a word (S47A-2). Now every listing door refuses it in one line naming
the key as listed and a fix that works (copy it to a key without the empty name)."""
from __future__ import annotations

import json

import pytest
from conftest import GPT2, S3_ENV  # noqa: F401  (S3_ENV: the s3 fixture's environment)

from packtool.errors import PacktoolError
from packtool.storage import expand

# the doors that list a prefix: the prefix, a glob of its objects, a glob matching the prefix, `**`
DOORS = ["t/data2/", "t/data2", "t/data2/*.jsonl", "t/dat*", "t/**", "t/**/*.jsonl"]


@pytest.fixture
def tree(s3):
    import boto3
    c = boto3.client("s3")
    body = "".join(json.dumps({"text": f"row {i}"}) + "\n" for i in range(3)).encode()
    for key in ("t/data2/a.jsonl", "t/data2//b.jsonl"):
        c.put_object(Bucket=s3[5:], Key=key, Body=body)
    return s3


def _said(e) -> str:
    said = str(e)
    assert "\n" not in said, said
    return said


@pytest.mark.parametrize("door", DOORS)
def test_a_listed_key_with_an_empty_name_is_refused_naming_it(tree, door):
    with pytest.raises(PacktoolError) as e:
        expand(f"{tree}/{door}", name="inputs")
    said = _said(e.value)
    assert f"{tree}/t/data2//b.jsonl" in said and "empty path component" in said, said
    assert "move it to" in said and f"{tree}/t/data2/b.jsonl" in said, said
    assert "does not exist" not in said, said


@pytest.mark.parametrize("door", DOORS)
def test_pack_says_the_same_line(tree, door, tmp_path):
    from typer.testing import CliRunner

    from packtool.cli.app import app
    r = CliRunner().invoke(app, ["pack", f"{tree}/{door}", "--tokenizer", GPT2, "-C", "64", "--dry-run", "--json",
                                 "-q", "--cache-dir", str(tmp_path / "cache")])
    assert r.exit_code == 2, r.output
    err = json.loads(r.stdout.strip().splitlines()[-1])["error"]
    assert f"{tree}/t/data2//b.jsonl" in err["message"] and "empty path component" in err["message"], err


def test_a_glob_that_names_no_such_key_is_read_as_before(tree):
    assert [x.shown for x in expand(f"{tree}/t/data2/a.*")] == [f"{tree}/t/data2/a.jsonl"]
