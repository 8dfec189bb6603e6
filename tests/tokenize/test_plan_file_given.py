"""S49A-3: a plan file (`packtool plan --output`) is the fourth thing packtool writes that a user
puts beside the data. Met as an input (named, in a folder input, matched by a glob, on a store,
by `verify --source`), it was "cannot tell the input shape ... fix with --shape", a fix that
cannot work for packtool's own file: it is said as a plan file at every door. And `plan -o
plan.json` wrote Parquet under a .json name, which the next `pack` of its folder called
"invalid UTF-8 ... re-encode the file": a plan file's name says Parquet or nothing, else refused
before any work, by the command line and the library alike."""
from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import upload_tree
from typer.testing import CliRunner

import packtool
from packtool.align import Alignment
from packtool.cli.app import app
from packtool.planning.plan_file import write_plan
from packtool.tokenize.config import TokenizeConfig
from packtool.tokenize.shape_detect import PLAN_COLUMNS

runner = CliRunner()
LENGTHS = np.array([5, 9, 3, 7])


def _plan_file(path) -> str:
    write_plan(packtool.plan(LENGTHS, Alignment(capacity=64)), str(path))
    return str(path)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """`d/` holding a pre-tokenized Parquet and a plan file beside it; `out/`, its packed output."""
    t = tmp_path_factory.mktemp("pl")
    (t / "d").mkdir()
    pq.write_table(pa.table({"input_ids": [[1, 2, 3, 4]] * 4}), t / "d" / "tok.parquet")
    _plan_file(t / "d" / "plan.parquet")
    r = runner.invoke(app, ["pack", str(t / "d" / "tok.parquet"), "-C", "64", "-q", "-o", str(t / "out"),
                            "--cache-dir", str(t / "c")])
    assert r.exit_code == 0, r.output
    return t


# door -> (command line below the data's base folder `{t}`, or a store spec `{s3}`)
DOORS = {"named": ["pack", "{t}/d/plan.parquet"],
         "named, --shape tokens": ["pack", "{t}/d/plan.parquet", "--shape", "tokens"],
         "in a folder input": ["pack", "{t}/d"],
         "matched by a glob": ["pack", "{t}/d/*.parquet"],
         "verify --source, in a folder": ["verify", "{t}/out", "--source", "{t}/d"],
         "named on a store": ["pack", "{s3}/d/plan.parquet"],
         "in a store prefix": ["pack", "{s3}/d/"]}


@pytest.mark.parametrize("door", list(DOORS))
def test_a_plan_file_met_as_input_is_said_as_one(data, door, tmp_path, request):
    s3 = ""
    if "store" in door:
        s3 = request.getfixturevalue("s3")
        upload_tree(str(data / "d"), f"{s3}/d")
    args = [a.format(t=data, s3=s3) for a in DOORS[door]]
    extra = ["-C", "64", "--dry-run"] if args[0] == "pack" else []
    r = runner.invoke(app, [*args, *extra, "--json", "--cache-dir", str(tmp_path / "c")])
    assert r.exit_code == 2, r.output
    err = json.loads(r.stdout.strip().splitlines()[-1])["error"]
    assert "is a packtool plan file" in err["message"] and "inspect --plan" in err["message"], err
    assert "cannot tell the input shape" not in err["message"] and err["flag"] != "--shape", err
    assert err["path"].endswith("plan.parquet"), err


def test_the_library_says_a_plan_file_as_one(data, tmp_path):
    with pytest.raises(packtool.PacktoolError) as e:
        packtool.pack([str(data / "d")], Alignment(capacity=64), tokenize=TokenizeConfig(), dry_run=True,
                      cache_dir=str(tmp_path / "c"))
    assert "is a packtool plan file" in str(e.value), str(e.value)


def test_the_columns_known_are_those_a_plan_file_has(data):
    assert set(pq.read_schema(data / "d" / "plan.parquet").names) == PLAN_COLUMNS


NAMES = ["plan.json", "plan.jsonl", "plan.csv", "plan.arrow", "plan.txt", "plan.npy", "PLAN.JSON", "plan.parquet.json"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("door", ["cli", "library"])
def test_a_plan_named_as_another_kind_is_refused(tmp_path, name, door):
    np.save(tmp_path / "lens.npy", LENGTHS)
    target = tmp_path / name
    if door == "cli":
        r = runner.invoke(app, ["plan", "--lengths", str(tmp_path / "lens.npy"), "-C", "64", "-o", str(target),
                                "--json"])
        assert r.exit_code == 2, r.output
        err = json.loads(r.stdout.strip().splitlines()[-1])["error"]
        msg = err["message"]
        assert err["flag"] == "--output" and err["kind"] == "output", err
    else:
        with pytest.raises(packtool.PacktoolError) as e:
            _plan_file(target)
        msg = str(e.value)
    fixed = "plan.parquet" if name != "PLAN.JSON" else "PLAN.parquet"
    assert msg.endswith(f"name it {fixed}") and "Parquet" in msg, msg
    assert sorted(os.listdir(tmp_path)) == ["lens.npy"]  # nothing written, no lock left


@pytest.mark.parametrize("name", ["plan.parquet", "plan.pq", "PLAN.PARQUET", "plan"])
def test_a_parquet_name_or_none_is_written(tmp_path, name):
    np.save(tmp_path / "lens.npy", LENGTHS)
    r = runner.invoke(app, ["plan", "--lengths", str(tmp_path / "lens.npy"), "-C", "64", "-o", str(tmp_path / name)])
    assert r.exit_code == 0, r.output
    assert set(pq.read_schema(tmp_path / name).names) == PLAN_COLUMNS
