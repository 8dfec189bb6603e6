"""M5: the files a folder, a store prefix or a glob lists are judged by one rule, local or on a
store (tokenize/file_kinds.listed_data): a file of rows of a kind packtool does not read is
refused naming it; any other file of no kind it reads (a README, a .txt) is passed over, named in
one note. A local glob refused such a file ("unknown file type") where a store glob, a folder and a
prefix passed it over; `DIR/**/*` (and `DIR/**`) over a folder with subfolders matched the folder
and the files in it, "input given more than once" (a folder a glob matches is read whole, as a
prefix a store glob matches is: each file once). And a missing `x.jsonlines` (a kind packtool
reads) was looked up as a Hub dataset name, not "input file not found"."""
from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from packtool.cli.app import app

runner = CliRunner()

# every form a listing is given as: a folder (a prefix on a store, with and without its `/`) and
# globs whose matches hold the subfolder itself, the files in it, or both
SPECS = ["fx", "fx/", "fx/*", "fx/**/*", "fx/**", "f*", "fx/**/"]


def _tree(root, extra: str | None) -> None:
    d = root / "fx"
    (d / "sub").mkdir(parents=True)
    pq.write_table(pa.table({"input_ids": [[1, 2, 3], [4, 5, 6, 7]]}), d / "a.parquet")
    (d / "sub" / "b.jsonl").write_text(json.dumps({"input_ids": [8, 9]}) + "\n")
    (d / "c.jsonlines").write_text(json.dumps({"input_ids": [10, 11, 12]}) + "\n")
    if extra:
        (d / extra).write_bytes(b"not rows packtool reads\n")


def _upload(root, uri: str) -> None:
    import boto3
    client = boto3.client("s3")
    bucket = uri.split("://", 1)[1]
    for here, _, names in os.walk(root / "fx"):
        for n in names:
            path = os.path.join(here, n)
            client.upload_file(path, bucket, os.path.relpath(path, root))


@pytest.fixture(params=["local", "store"])
def place(request, tmp_path):
    """Where the tree lies: a function writing it (with one extra file, or none) and returning
    the root the specs are joined to."""
    def make(extra):
        _tree(tmp_path, extra)
        if request.param == "local":
            return str(tmp_path)
        uri = request.getfixturevalue("s3")
        _upload(tmp_path, uri)
        return uri
    return make


def _pack(spec: str):
    r = runner.invoke(app, ["--json", "pack", spec, "-C", "64", "--dry-run", "-q"])
    return r, json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("spec", SPECS)
def test_each_file_is_read_once(place, spec):
    r, d = _pack(f"{place(None)}/{spec}")
    assert r.exit_code == 0, r.output
    assert d["sequences"] == 4, d
    assert d["notes"] == [], d["notes"]


@pytest.mark.parametrize("extra", ["README.md", "sub/NOTES.txt", "LICENSE"])
@pytest.mark.parametrize("spec", SPECS)
def test_a_file_of_no_kind_packtool_reads_is_passed_over_in_a_note(place, spec, extra):
    r, d = _pack(f"{place(extra)}/{spec}")
    assert r.exit_code == 0, r.output
    assert d["sequences"] == 4, d
    said = [n for n in d["notes"] if "passed over" in n]
    assert len(said) == 1 and os.path.basename(extra) in said[0], d["notes"]


@pytest.mark.parametrize("extra", ["more.npy", "sub/more.jsonl.gzip"])
@pytest.mark.parametrize("spec", SPECS)
def test_a_file_of_rows_packtool_does_not_read_is_refused_naming_it(place, spec, extra):
    r, d = _pack(f"{place(extra)}/{spec}")
    assert r.exit_code == 2, r.output
    msg = d["error"]["message"]
    assert os.path.basename(extra) in msg and "cannot read" in msg and "\n" not in msg, msg


@pytest.mark.parametrize("name", ["x.jsonlines", "x.jsonlines.gz", "x.jsonlines.zst", "x.ndjson.bz2", "x.csv.zst",
                                  "x.tsv.gz", "x.npy", "x.jsonl.gzip", "x.parquet.snappy", "x.feather"])
def test_a_missing_file_of_a_kind_packtool_knows_is_not_found(tmp_path, monkeypatch, name):
    from packtool.tokenize.hub_load import is_dataset_name
    assert not is_dataset_name(name)
    monkeypatch.chdir(tmp_path)  # a bare name, as typed: no folder says "a path"
    r = runner.invoke(app, ["--json", "pack", name, "-C", "64", "--dry-run", "-q"])
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert r.exit_code == 2 and "not found" in d["error"]["message"], d
