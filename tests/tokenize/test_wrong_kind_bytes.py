"""S48A-11: a data file whose bytes are another kind than its name says (gzip'ed in place, a
download saved without its .gz, a Parquet file named .jsonl or .arrow, plain text under a .gz or
.parquet name) was refused in its reader's words: "invalid UTF-8 ... re-encode the file as UTF-8"
for a binary file, "Not a gzipped file", "Parquet magic bytes not found": a damaged file, where
only its name is wrong. One rule (tokenize/byte_kinds.misnamed, asked where a read fails): the
refusal names the kind its bytes are and the name to give it, at every door a file comes in by
(the file, a folder, a glob, a store object and prefix, the library), exit 2 in one line; a file
whose bytes agree with its name keeps its reader's words."""
from __future__ import annotations

import bz2
import gzip
import io
import json
import os

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.errors import PacktoolInputError

runner = CliRunner()
ROWS = b"".join(json.dumps({"input_ids": [i, i + 1, i + 2]}).encode() + b"\n" for i in range(5))
ARRAY = json.dumps([{"input_ids": [i, i + 1, i + 2]} for i in range(5)], indent=1).encode()
TABLE = pa.table({"input_ids": [[1, 2, 3], [4, 5, 6]]})


def _parquet() -> bytes:
    buf = io.BytesIO()
    pq.write_table(TABLE, buf)
    return buf.getvalue()


def _arrow() -> bytes:
    buf = io.BytesIO()
    feather.write_feather(TABLE, buf)
    return buf.getvalue()


def _zstd(data: bytes) -> bytes:
    out = pa.BufferOutputStream()
    with pa.CompressedOutputStream(out, "zstd") as f:
        f.write(data)
    return out.getvalue().to_pybytes()


# file name -> (its bytes, what the refusal says)
CASES = {
    "a.jsonl": (lambda: gzip.compress(ROWS), ["holds gzip-compressed data", "rename it a.jsonl.gz"]),
    "f.jsonl": (_parquet, ["is a Parquet file", "rename it f.parquet"]),
    "b.jsonl.gz": (lambda: ROWS, ["is not gzip-compressed (it holds text)", "rename it b.jsonl"]),
    "c.jsonl.gz": (lambda: _zstd(ROWS), ["holds zstd-compressed data", "rename it c.jsonl.zst"]),
    "z.jsonl.zst": (lambda: bz2.compress(ROWS), ["holds bzip2-compressed data", "rename it z.jsonl.bz2"]),
    "d.arrow": (_parquet, ["is a Parquet file", "rename it d.parquet"]),
    "e.parquet": (lambda: ROWS, ["holds JSON text", "rename it e.jsonl"]),
    "g.parquet": (_arrow, ["is an Arrow IPC file", "rename it g.arrow"]),
    "h.parquet": (lambda: gzip.compress(ROWS), ["holds gzip-compressed data", "decompress it (gunzip)"]),
    "j.json": (lambda: gzip.compress(ROWS), ["holds gzip-compressed data", "rename it j.json.gz"]),
    # a JSON array: a .json.gz is read as JSON Lines, so renaming it was refused again (RA-5, s50)
    "k.json": (lambda: gzip.compress(ARRAY), ["holds gzip-compressed data", "decompress it (gunzip)"]),
}


def _local(tmp_path, name, data, door):
    d = tmp_path / "mm"
    d.mkdir()
    (d / name).write_bytes(data)
    return {"file": str(d / name), "folder": str(d), "glob": str(d / "*")}[door]


def _store(tmp_path, name, data, door, uri):
    import boto3
    bucket = uri.split("://", 1)[1]
    boto3.client("s3").put_object(Bucket=bucket, Key=f"mm/{name}", Body=data)
    return {"store object": f"{uri}/mm/{name}", "store prefix": f"{uri}/mm/", "store glob": f"{uri}/mm/*"}[door]


DOORS = ["file", "folder", "glob", "store object", "store prefix", "store glob"]


def _said(request, tmp_path, name, door) -> str:
    make, _ = CASES[name]
    spec = (_local(tmp_path, name, make(), door) if not door.startswith("store") else
            _store(tmp_path, name, make(), door, request.getfixturevalue("s3")))
    r = runner.invoke(app, ["--json", "pack", spec, "-C", "64", "--dry-run", "-q"])
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    msg = d["error"]["message"]
    assert "\n" not in msg and name in msg, msg
    return msg


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("name", CASES)
def test_a_file_of_another_kind_than_its_name_is_said_so(request, tmp_path, name, door):
    msg = _said(request, tmp_path, name, door)
    for words in CASES[name][1]:
        assert words in msg, msg
    assert "re-encode" not in msg and "magic bytes" not in msg and "Not a gzipped" not in msg, msg


@pytest.mark.parametrize("name", ["a.jsonl", "e.parquet"])
def test_the_library_says_it_too(tmp_path, name):
    from packtool.packing import pack
    path = tmp_path / name
    path.write_bytes(CASES[name][0]())
    with pytest.raises(PacktoolInputError) as e:
        pack([str(path)], dry_run=True, cache_dir=str(tmp_path / "c"))
    assert CASES[name][1][1] in str(e.value), str(e.value)


# a file whose bytes are its name's kind, damaged: its reader's own words
AGREEING = {
    "bad.jsonl": (ROWS + b'{"input_ids": [1, 2\n', "invalid JSON"),
    "cut.parquet": (_parquet()[:-20], "cannot read"),
    "cut.jsonl.gz": (gzip.compress(ROWS)[:-12], "cannot read"),
    "latin1.jsonl": (b'{"input_ids": [1], "t": "caf\xe9"}\n', "invalid UTF-8"),
}


@pytest.mark.parametrize("name", AGREEING)
def test_a_damaged_file_of_its_names_kind_keeps_its_readers_words(tmp_path, name):
    data, words = AGREEING[name]
    (tmp_path / name).write_bytes(data)
    r = runner.invoke(app, ["--json", "pack", str(tmp_path / name), "-C", "64", "--dry-run", "-q"])
    msg = json.loads(r.stdout.strip().splitlines()[-1])["error"]["message"]
    assert r.exit_code == 2 and words in msg and "rename it" not in msg, msg
    assert os.path.basename(name) in msg


@pytest.mark.parametrize("name", [n for n in CASES if n.endswith((".json", ".jsonl", ".gz", ".zst"))])
def test_the_fix_given_reads_the_file(tmp_path, name):
    """The line's fix, followed (a rename, or the decompression), gives a file packtool reads."""
    import re
    from packtool.packing import pack
    data = CASES[name][0]()
    (tmp_path / name).write_bytes(data)
    with pytest.raises(PacktoolInputError) as e:
        pack([str(tmp_path / name)], dry_run=True, cache_dir=str(tmp_path / "c"))
    msg = str(e.value)
    if "decompress it (gunzip)" in msg and "rename it" not in msg:
        (tmp_path / name).write_bytes(gzip.decompress(data))
        fixed = name
    else:
        fixed = re.search(r"rename it (\S+?)(?:[ ;:]|$)", msg).group(1)
        (tmp_path / name).rename(tmp_path / fixed)
    pack([str(tmp_path / fixed)], dry_run=True, cache_dir=str(tmp_path / "c2"))
