"""JSON inputs as their writers make them, and messages that send the user the right way (S45A-8):

- a UTF-8 BOM (Windows editors, PowerShell) opening a file is skipped by every text kind: a .json
  array with one was "invalid JSON at line 1, column 1", though a BOM in .jsonl, .csv, .tsv and the
  compressed ones was skipped;
- a compressed .json (`gzip data.json`: .json.gz, .json.zst, .json.bz2) is read as JSON Lines; one
  holding an array was told "write each line as one {...} object", not that the file kind is JSON
  Lines nor how to read the array (decompress it);
- a token id beyond int64 (read by the JSON reader as a float) was printed as that float (`1e+23`),
  not a value the file holds."""
from __future__ import annotations

import bz2
import gzip
import json

import pyarrow as pa
import pytest

from packtool.errors import PacktoolInputError
from packtool.tokenize.readers import iter_batches, resolve_inputs

ROWS = [{"text": "caf\u00e9 one", "n": 1}, {"text": "two", "n": 2}]
BOM = b"\xef\xbb\xbf"


def _zstd(b: bytes) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, "zstd") as f:
        f.write(b)
    return sink.getvalue().to_pybytes()


COMPRESS = {"": lambda b: b, ".gz": gzip.compress, ".zst": _zstd, ".bz2": bz2.compress}


def _array(rows):
    return json.dumps(rows, ensure_ascii=False).encode()


def _lines(rows):
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()


def _csv(rows, sep):
    return ("text" + sep + "n\n" + "".join(f"{r['text']}{sep}{r['n']}\n" for r in rows)).encode()


# every text kind packtool reads, as its text (before compression)
KINDS = {".json (array)": (".json", _array), ".json (JSON Lines)": (".json", _lines), ".jsonl": (".jsonl", _lines),
         ".ndjson": (".ndjson", _lines), ".csv": (".csv", lambda r: _csv(r, ",")),
         ".tsv": (".tsv", lambda r: _csv(r, "\t"))}
CASES = [(k, c) for k in KINDS for c in COMPRESS if not (k == ".json (array)" and c)]


def _read(path):
    files = resolve_inputs([str(path)])
    return [row for f in files for b in iter_batches(f, 64, ["text", "n"]) for row in b.to_pylist()]


@pytest.mark.parametrize("kind,codec", CASES, ids=[f"{k}{c}" for k, c in CASES])
def test_a_bom_opening_any_text_file_is_skipped(tmp_path, kind, codec):
    ext, text = KINDS[kind]
    plain, bommed = tmp_path / f"plain{ext}{codec}", tmp_path / f"bom{ext}{codec}"
    plain.write_bytes(COMPRESS[codec](text(ROWS)))
    bommed.write_bytes(COMPRESS[codec](BOM + text(ROWS)))
    want = _read(plain)
    assert [r["text"] for r in want] == ["caf\u00e9 one", "two"]
    assert _read(bommed) == want


@pytest.mark.parametrize("codec", [c for c in COMPRESS if c])
@pytest.mark.parametrize("bom", [b"", BOM], ids=["", "bom"])
def test_a_compressed_json_array_says_the_file_is_read_as_json_lines(tmp_path, codec, bom):
    path = tmp_path / f"data.json{codec}"
    path.write_bytes(COMPRESS[codec](bom + _array(ROWS)))
    with pytest.raises(PacktoolInputError) as e:
        _read(path)
    msg = str(e.value)
    assert "\n" not in msg
    assert f"a .json{codec} file is read as JSON Lines" in msg and "decompress it" in msg, msg


@pytest.mark.parametrize("kind", [".jsonl", ".json (array)"])
@pytest.mark.parametrize("written", ["99999999999999999999999", "-99999999999999999999999", "18446744073709551616"])
def test_a_token_id_beyond_int64_is_not_said_as_a_float(tmp_path, kind, written):
    from packtool.align import Alignment
    from packtool.packing import pack
    path = tmp_path / ("ids.jsonl" if kind == ".jsonl" else "ids.json")
    row = '{"input_ids": [1, ' + written + ', 3]}'
    path.write_text(row + "\n" if kind == ".jsonl" else "[" + row + "]")
    with pytest.raises(PacktoolInputError) as e:
        pack([str(path)], Alignment(capacity=64), output=str(tmp_path / "o"), cache_dir=str(tmp_path / "c"))
    msg = str(e.value)
    assert "input_ids[1]" in msg and "e+" not in msg and "int64" in msg, msg
