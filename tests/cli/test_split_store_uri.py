"""S47A-11: `pack s3://B/dd/ --split train` (a DatasetDict saved to a store, the flag the local
folder takes) was sent to the Hub door: "dataset not in the local cache and the Hub cannot be
reached; ... hf download --repo-type dataset s3://B/dd/", a line about a Hub never asked and a fix
that cannot work. --split and --config read a dataset name or a local folder through `datasets`:
with a store URI they are one line naming the flag and what reads the split alone (its listing's:
test_split_store_fix), before the Hub door is reached."""
from __future__ import annotations

import json

import pytest
from conftest import GPT2
from typer.testing import CliRunner

from packtool.cli.app import app

runner = CliRunner()
FLAGS = {"--split": ["--split", "train"], "--config": ["--config", "main"],
         "both": ["--split", "train", "--config", "main"]}
URIS = ["s3://ddb/dd/", "s3://ddb/dd", "s3://ddb/dd/data.jsonl"]


@pytest.mark.parametrize("uri", URIS)
@pytest.mark.parametrize("flags", FLAGS)
def test_split_or_config_with_a_store_uri_is_refused_naming_the_prefix(s3, monkeypatch, uri, flags):
    from packtool.storage import locate
    uri = uri.replace("s3://ddb", s3)
    # a store that answers (one that does not: test_split_store_unlisted)
    locate(f"{s3}/dd/data.jsonl").write_bytes(b'{"input_ids": [1, 2]}\n')
    import packtool.tokenize.hub_load as hf
    monkeypatch.setattr(hf, "load_dataset", lambda *a, **k: pytest.fail("a store URI reached the datasets door"))
    r = runner.invoke(app, ["--json", "pack", uri, *FLAGS[flags], "--tokenizer", GPT2, "-C", "64", "--dry-run"])
    assert r.exit_code == 2, r.output
    err = json.loads(r.stdout.strip().splitlines()[-1])["error"]
    msg, flag = err["message"], FLAGS[flags][0]
    assert err["flag"] == flag and flag in msg and "store" in msg, err
    assert "Hub" not in msg and "hf download" not in msg and "\n" not in msg, msg
    if flag == "--split":  # no split named (test_split_store_fix names each layout's); an object is no listing
        claim = "no object below it names split train"
        assert (claim in msg) == (not uri.endswith(".jsonl")) and "pass the objects that hold it" in msg, msg
