"""S47A-9: a table format's folder (Delta Lake's `_delta_log/`, Apache Iceberg's
`metadata/*.metadata.json`, Apache Hudi's `.hoodie/`) was read file by file: its log as rows
("cannot tell the input shape", whose fix sends the user to read the log as data), and a glob of
its Parquet files packed the versions the table removed or overwrote beside the current one, rc 0,
no note. Every folder-expanding route (readers.resolve_inputs through own_trees, their one
owner: a folder, a folder holding the table, a glob of its files, a glob above it, a partition
folder inside it, a store prefix and a store glob) refuses it in one line naming the table and
its own reader; a file named by its path is read as asked."""
from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.errors import PacktoolInputError
from packtool.storage import locate
from packtool.tokenize.readers import resolve_inputs

runner = CliRunner()
PART = "part-00000-bbb.snappy.parquet"


def _delta(t):
    (t / "_delta_log").mkdir()
    (t / "_delta_log" / "00000000000000000000.json").write_text(json.dumps({"add": {"path": PART}}) + "\n")


def _iceberg(t):
    (t / "metadata").mkdir()
    (t / "metadata" / "v1.metadata.json").write_text("{}")


def _hudi(t):
    (t / ".hoodie").mkdir()
    (t / ".hoodie" / "hoodie.properties").write_text("hoodie.table.name=t\n")


TABLES = {"Delta Lake": _delta, "Apache Iceberg": _iceberg, "Apache Hudi": _hudi}
SUB = {"Apache Iceberg": "data"}  # where its files lie below the root; a partition folder otherwise


def _table(tmp_path, kind) -> str:
    """data/tbl: a table of its format, with its current and a removed version's part, in a
    partition folder (p=1; Iceberg's data/) too."""
    t = tmp_path / "data" / "tbl"
    (t / SUB.get(kind, "p=1")).mkdir(parents=True)
    for name in (PART, "part-00000-aaa.snappy.parquet", f"{SUB.get(kind, 'p=1')}/{PART}"):
        pq.write_table(pa.table({"input_ids": [[1, 2, 3]]}), t / name)
    TABLES[kind](t)
    return str(t)


# (the table's root, its partition folder's name) -> the input; RA-1: a store prefix or glob
# below the table's root (a partition, Iceberg's data/) was read file by file, the local one refused
PLACES = {"the table folder": lambda t, p: t, "a folder holding it": lambda t, p: os.path.dirname(t),
          "a glob of its files": lambda t, p: f"{t}/*.parquet",
          "a glob above it": lambda t, p: f"{os.path.dirname(t)}/**/*.parquet",
          "its partition folder": lambda t, p: f"{t}/{p}", "a glob in its partition": lambda t, p: f"{t}/{p}/*.parquet",
          "store prefix": lambda t, p: t, "store glob": lambda t, p: f"{t}/*.parquet",
          "store partition prefix": lambda t, p: f"{t}/{p}/", "store glob in its partition": lambda t, p: f"{t}/{p}/*.parquet",
          "store glob of partitions": lambda t, p: f"{t}/*/*.parquet"}


def _spec(place, table, kind, request) -> tuple[str, str]:
    """The input spec, and the table's path as the refusal names it."""
    sub = SUB.get(kind, "p=1")
    if not place.startswith("store"):
        return PLACES[place](table, sub), table
    s3 = request.getfixturevalue("s3")
    for root, _, files in os.walk(table):
        for n in files:
            rel = os.path.relpath(os.path.join(root, n), table)
            locate(f"{s3}/tbl/{rel}").write_bytes(open(os.path.join(root, n), "rb").read())
    return PLACES[place](f"{s3}/tbl", sub), f"{s3}/tbl"


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("kind", TABLES)
def test_a_table_formats_folder_is_refused_naming_it_and_its_reader(request, tmp_path, kind, place):
    spec, table = _spec(place, _table(tmp_path, kind), kind, request)
    with pytest.raises(PacktoolInputError) as e:
        resolve_inputs([spec])
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{locate(table).shown if '://' in table else table}: a"), msg
    assert kind in msg and "export its current version" in msg, msg


@pytest.mark.parametrize("kind", TABLES)
def test_the_cli_says_it_in_one_line_exit_2(tmp_path, kind):
    table = _table(tmp_path, kind)
    r = runner.invoke(app, ["pack", table, "-C", "64", "--dry-run", "-q"])
    assert r.exit_code == 2 and kind in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.output


@pytest.mark.parametrize("kind", TABLES)
def test_a_file_named_by_its_path_is_read_as_asked(tmp_path, kind):
    table = _table(tmp_path, kind)
    assert [os.path.basename(f.path) for f in resolve_inputs([os.path.join(table, PART)])] == [PART]


def test_a_folder_named_metadata_without_iceberg_files_is_data(tmp_path):
    d = tmp_path / "data"
    (d / "metadata").mkdir(parents=True)
    pq.write_table(pa.table({"input_ids": [[1, 2, 3]]}), d / "metadata" / "a.parquet")
    assert len(resolve_inputs([str(d)])) == 1


def test_a_store_prefix_whose_credentials_see_nothing_above_it_is_read(tmp_path, s3, monkeypatch):
    """RA-1's question above the prefix, asked with credentials for the prefix alone (a policy
    on the prefix: every request above it denied), passes: the listing of the prefix answered."""
    from packtool.storage import Location, store_error
    locate(f"{s3}/team/data/a.jsonl").write_bytes(b'{"input_ids": [1, 2, 3]}\n')
    asked = Location.info_of

    def denied_above(self, path):
        if not path.startswith(f"{s3[5:]}/team/data"):
            raise store_error("inputs")("cannot stat it (AWS Error ACCESS_DENIED during HeadObject operation)",
                                        path=path)
        return asked(self, path)
    monkeypatch.setattr(Location, "info_of", denied_above)
    assert [f.path for f in resolve_inputs([f"{s3}/team/data/"], quiet=True)] == [f"{s3}/team/data/a.jsonl"]
