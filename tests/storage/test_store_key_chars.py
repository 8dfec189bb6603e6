"""S45A-6: an object a prefix or a glob finds is read as itself, once, whatever its key holds. A
listed key was pasted into a URI as it is, and the URI read back percent-decoded: `in/p%41.jsonl`
was read as `in/pA.jsonl` (that object twice, its own never, rc 0), and a key holding `#` or `?`
made the prefix unreadable, with a fix naming a URI the user never wrote. Every key character a
URI holds only escaped, through every way a store input is found (a prefix, a glob), as the same
names in a local folder read; the manifest names each object by a URI that reads it back, and
verify --source reads the same. The prefix's own name, escaped in the URI the user typed, is
kept as typed."""
from __future__ import annotations

import json
import os

import pyarrow.parquet as pq
import pytest
from conftest import LOCAL_RAY_GROUP, S3_ENV  # noqa: F401  (S3_ENV: the s3 fixture's environment)
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.slabs.names import MANIFEST
from packtool.storage import locate

runner = CliRunner()
# each name's object holds one row of its own token id
NAMES = {"p%41.jsonl": 11, "pA.jsonl": 12, "a#b.jsonl": 13, "q?x=1.jsonl": 14, "sp ace.jsonl": 15,
         "pct%.jsonl": 16, "u%2Fv.jsonl": 17, "plus+amp&.jsonl": 18, "caf\u00e9.jsonl": 19}


@pytest.fixture
def places(s3, tmp_path):
    import boto3
    local = tmp_path / "in dir"  # the prefix's own name needs an escape in a URI too
    local.mkdir()
    for name, tok in NAMES.items():
        body = json.dumps({"input_ids": [tok, tok, tok]}).encode() + b"\n"
        boto3.client("s3").put_object(Bucket=s3[5:], Key=f"in dir/{name}", Body=body)
        (local / name).write_bytes(body)
    return {"store": f"{s3}/in%20dir", "folder": str(local)}


def _packed(out: str) -> list[int]:
    t = pq.read_table(out, columns=["input_ids", "cu_seqlens"]).to_pylist()
    return sorted(r["input_ids"][s] for r in t for s in r["cu_seqlens"][:-1])


# how: (the tail after the prefix in a URI, in a local path, the names it reads)
HOWS = {"prefix": ("", "", NAMES), "prefix/": ("/", "/", NAMES), "glob": ("/*.jsonl", "/*.jsonl", NAMES),
        "glob with an escape": ("/p%2541*", "/p%41*", ["p%41.jsonl"]),
        "glob of escaped names": ("/*%20*", "/* *", ["sp ace.jsonl"])}


@pytest.mark.parametrize("where", ["store", "folder"])
@pytest.mark.parametrize("how", sorted(HOWS))
def test_every_listed_object_is_read_as_itself_once(places, tmp_path, where, how):
    tail, local_tail, names = HOWS[how]
    spec = places[where] + (tail if where == "store" else local_tail)
    want = sorted(NAMES[n] for n in names)
    out = str(tmp_path / "out")
    r = runner.invoke(app, ["pack", spec, "-C", "16", "-q", "-o", out, "--cache-dir", str(tmp_path / "c")])
    assert r.exit_code == 0, r.stdout + r.stderr
    assert _packed(out) == want
    files = [f[0] for f in json.load(open(os.path.join(out, MANIFEST)))["input"]["files"]]
    # each name the manifest records reads back the object it names
    assert sorted(json.loads(locate(f).read_bytes())["input_ids"][0] for f in files) == want
    v = runner.invoke(app, ["verify", out, "--source", spec, "--cache-dir", str(tmp_path / "c")])
    assert v.exit_code == 0, v.stdout + v.stderr


@LOCAL_RAY_GROUP
def test_the_ray_engine_reads_each_object_as_itself_once(places, tmp_path, local_ray):
    """The Ray engine's tasks locate each file again from its URI (text, never a filesystem object)."""
    out = str(tmp_path / "out")
    r = runner.invoke(app, ["pack", places["store"] + "/", "-C", "16", "-q", "-o", out, "--engine", "ray",
                            "--cache-dir", str(tmp_path / "c")])
    assert r.exit_code == 0, r.stdout + r.stderr
    assert _packed(out) == sorted(NAMES.values())
