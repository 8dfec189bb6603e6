"""RA-10 / RB-13: `pack STORE_URI --split S` whose listing did not answer (a store that does not
answer, a bucket that does not exist) or found nothing (no such prefix, a glob matching nothing)
was told "no object below it names split S": a fact about objects nobody listed, where the same URI
without --split says the store's own line ("names a store that cannot be reached", "input not
found"). Now the listing's own line is said at both doors (the CLI and the library's
resolve_sources), the same as without --split; the claim is made only of prefixes listed."""
from __future__ import annotations

import json

import pytest
from conftest import GPT2
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.errors import PacktoolError
from packtool.storage import locate

# place -> its URI (`{s3}`: the test's bucket). file:// is a local path now (8a125f1): the datasets door reads it
PLACES = {
    "a store that does not answer": "s3://bucket/repo",
    "a bucket that does not exist": "s3://no-such-bucket-ra10/repo",
    "no such prefix": "{s3}/no/such/prefix",
    "a glob matching nothing": "{s3}/no/such/pre*",
}


def _cli(args: list[str]) -> tuple[int, dict]:
    r = CliRunner().invoke(app, ["--json", "pack", *args, "--tokenizer", GPT2, "-C", "64", "--dry-run"])
    return r.exit_code, json.loads(r.stdout.strip().splitlines()[-1])["error"]


def _library(args: list[str]) -> tuple[int, dict]:
    from packtool.tokenize.hf_input import resolve_sources
    with pytest.raises(PacktoolError) as e:
        resolve_sources(args[0], split=args[2] if len(args) > 1 else None)
    return 2, {"message": str(e.value)}


DOORS = {"the CLI": _cli, "the library (resolve_sources)": _library}


@pytest.fixture
def place(request, s3_endpoint, monkeypatch):
    """The URI of the place; the store chain pointed at a closed port for the one that does not answer."""
    from conftest import S3_ENV, closed_store
    if "does not answer" in request.param:
        closed_store(monkeypatch)
    else:
        for k, v in {**S3_ENV, "AWS_ENDPOINT_URL": s3_endpoint}.items():
            monkeypatch.setenv(k, v)
        monkeypatch.delenv("AWS_PROFILE", raising=False)
    s3 = ""
    if "{s3}" in PLACES[request.param]:
        s3 = request.getfixturevalue("s3")
    return PLACES[request.param].format(s3=s3)


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("place", PLACES, indirect=True)
def test_split_on_a_listing_that_did_not_run_says_the_listings_own_line(place, door):
    rc, err = DOORS[door]([place, "--split", "train"])
    said, without = err["message"], DOORS[door]([place])[1]["message"]
    assert rc == 2 and "no object below it names split" not in said, err
    assert said == without and "\n" not in said, (said, without)  # one class by door: --split or none


@pytest.mark.parametrize("door", DOORS)
def test_an_object_given_with_split_is_refused_without_a_claim_about_objects(s3, door):
    """An object named as itself is no listing of a prefix: nothing was looked for below it."""
    locate(f"{s3}/repo/data.jsonl").write_bytes(b'{"input_ids": [1, 2]}\n')
    rc, err = DOORS[door]([f"{s3}/repo/data.jsonl", "--split", "train"])
    flag = "--split" if door == "the CLI" else "split"  # as each door spells it
    assert rc == 2 and "names split" not in err["message"], err
    assert f"pass the objects that hold it without {flag}" in err["message"], err
