"""S47A-12: inside a folder input (or below a store prefix read whole) a file of a kind packtool
does not read was refused only when its name ended in a short list (.xz, .orc, ...); every other
kind (`.jsonlines`, `x.jsonl.gzip`, `x.parquet.snappy`, `.npy`, Megatron's `.bin`/`.idx`, `.pt`,
`.pkl`, `.h5`, `.tfrecord`, `.txt`) was passed over, rc 0, notes [], its rows lost without a word.
The rule now (tokenize/file_kinds.py): a `.jsonlines` file is JSON Lines and read; a file of a kind
that holds rows packtool does not read is refused naming it, as the list's were; any other file
(README.md, a .txt, LICENSE) is passed over and named in one note. Held at both doors a folder's
files are judged at: a local folder and a store prefix."""
from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from packtool.cli.app import app

runner = CliRunner()
ROWS = {"input_ids": [[1, 2, 3], [4, 5, 6, 7]]}

# kinds that hold rows packtool does not read: refused, naming the file
REFUSED = ["jsonl.gzip", "parquet.snappy", "npy", "npz", "bin", "idx", "pt", "pth", "pkl", "pickle", "h5", "hdf5",
           "tfrecord", "tfrecords", "msgpack", "xz", "orc"]
# anything else: passed over, named in a note
NOTED = ["txt", "md", "yaml", "py", ""]


def _folder(tmp_path, extra: dict[str, bytes]) -> str:
    d = tmp_path / "fx"
    d.mkdir()
    pq.write_table(pa.table(ROWS), d / "a.parquet")
    for name, data in extra.items():
        (d / name).write_bytes(data)
    return str(d)


def _to_store(folder: str, uri: str) -> str:
    import boto3
    bucket = uri.split("://", 1)[1]
    client = boto3.client("s3")
    for name in os.listdir(folder):
        client.upload_file(os.path.join(folder, name), bucket, f"fx/{name}")
    return f"{uri}/fx"


@pytest.fixture(params=["folder", "store"])
def door(request):
    """How the folder is given: a local folder, or a store prefix holding the same files."""
    if request.param == "folder":
        return lambda folder: folder
    uri = request.getfixturevalue("s3")
    return lambda folder: _to_store(folder, uri)


def _pack(spec: str):
    r = runner.invoke(app, ["--json", "pack", spec, "-C", "64", "--dry-run", "-q"])
    return r, json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("ext", REFUSED)
def test_a_file_of_rows_packtool_does_not_read_is_refused_naming_it(tmp_path, door, ext):
    name = f"more.{ext}"
    r, d = _pack(door(_folder(tmp_path, {name: b"rows of a kind packtool does not read"})))
    assert r.exit_code == 2, r.output
    msg = d["error"]["message"]
    assert name in msg and "cannot read" in msg and "\n" not in msg, msg


def test_a_jsonlines_file_is_read_as_json_lines(tmp_path, door):
    text = "".join(json.dumps({"input_ids": ids}) + "\n" for ids in ROWS["input_ids"])
    r, d = _pack(door(_folder(tmp_path, {"more.jsonlines": text.encode()})))
    assert r.exit_code == 0, r.output
    assert d["sequences"] == 4 and not any("passed over" in n for n in d["notes"]), d


@pytest.mark.parametrize("ext", NOTED)
def test_any_other_file_is_passed_over_in_one_note_naming_it(tmp_path, door, ext):
    name = f"NOTES.{ext}" if ext else "LICENSE"
    r, d = _pack(door(_folder(tmp_path, {name: b"not rows", "README.md": b"# data\n"})))
    assert r.exit_code == 0, r.output
    assert d["sequences"] == 2, d
    said = [n for n in d["notes"] if "passed over" in n]
    assert len(said) == 1 and name in said[0] and "README.md" in said[0] and "2 files" in said[0], d["notes"]


def test_a_folder_of_data_files_alone_says_nothing(tmp_path, door):
    r, d = _pack(door(_folder(tmp_path, {})))
    assert r.exit_code == 0 and d["notes"] == [], (r.output, d)
