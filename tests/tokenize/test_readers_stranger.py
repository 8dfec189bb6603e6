"""Inputs a new user hands packtool: zstd / bzip2 JSON Lines read like .gz (same rows, progress
by compressed bytes), and paths whose names hold glob characters (`run[1].jsonl`, a folder
`data[1]/`) read as the paths they are."""
from __future__ import annotations

import bz2
import gzip
import json
import os
import shutil

import pyarrow as pa
import pytest
from conftest import GSM8K

from packtool.errors import PacktoolInputError
from packtool.tokenize.readers import iter_batches, peek_columns, resolve_inputs
from packtool.tokenize.text_readers import jsonl_batches


def _rows() -> list[dict]:
    with open(GSM8K) as f:
        return [json.loads(line) for line in f]


def _read_all(paths, batch_size=37) -> list[dict]:
    rows = []
    for f in resolve_inputs(paths):
        for b in iter_batches(f, batch_size):
            rows += b.to_pylist()
    return rows


def _compress(src: str, dst, codec: str) -> None:
    with open(src, "rb") as f:
        data = f.read()
    if codec == "gzip":
        dst.write_bytes(gzip.compress(data))
    elif codec == "bz2":
        dst.write_bytes(bz2.compress(data))
    else:
        with pa.OSFile(str(dst), "wb") as raw, pa.CompressedOutputStream(raw, codec) as out:
            out.write(data)


@pytest.mark.parametrize("suffix,codec", [(".jsonl.zst", "zstd"), (".jsonl.zstd", "zstd"),
                                          (".ndjson.bz2", "bz2"), (".jsonl.bz2", "bz2")])
def test_zstd_and_bzip2_jsonl_read_like_plain(tmp_path, suffix, codec):
    p = tmp_path / f"gsm{suffix}"
    _compress(GSM8K, p, codec)
    assert _read_all([str(p)]) == _rows()
    assert peek_columns(resolve_inputs([str(p)])[0]) == ["question", "answer"]


@pytest.mark.parametrize("suffix,codec", [(".jsonl.gz", "gzip"), (".jsonl.zst", "zstd"), (".jsonl.bz2", "bz2")])
def test_progress_of_compressed_jsonl_counts_compressed_bytes(tmp_path, suffix, codec):
    """The tokenize bar's total is the file's size on disk; what the reader reports must end
    exactly there (never the decompressed size, which would run the bar past 100%)."""
    p = tmp_path / f"gsm{suffix}"
    _compress(GSM8K, p, codec)
    seen: list[int] = []
    rows = sum(b.num_rows for b in jsonl_batches(str(p), 64, None, block_bytes=16 << 10,
                                                  read_bytes=seen.append))
    assert rows == len(_rows())
    assert seen == sorted(seen) and len(seen) > 1
    assert seen[-1] == p.stat().st_size < os.path.getsize(GSM8K)


def test_damaged_zstd_is_one_line(tmp_path):
    p = tmp_path / "bad.jsonl.zst"
    # zstd's magic, then no frame (text under a .zst name is said as text: test_wrong_kind_bytes)
    p.write_bytes(b"\x28\xb5\x2f\xfd" + b"this is not zstd at all\n" * 10)
    with pytest.raises(PacktoolInputError, match=r"bad\.jsonl\.zst.*cannot read file"):
        _read_all([str(p)])


def test_folder_of_compressed_jsonl_is_read(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    _compress(GSM8K, d / "a.jsonl.zst", "zstd")
    _compress(GSM8K, d / "b.jsonl.bz2", "bz2")
    assert _read_all([str(d)]) == _rows() * 2


def test_file_named_with_glob_characters_is_that_file(tmp_path):
    p = tmp_path / "run[1].jsonl"
    shutil.copy(GSM8K, p)
    (tmp_path / "run1.jsonl").write_text('{"question": "other", "answer": "file"}\n')  # what [1] would match
    assert _read_all([str(p)]) == _rows()


def test_folder_named_with_glob_characters_is_that_folder(tmp_path):
    d = tmp_path / "data[1]"
    d.mkdir()
    shutil.copy(GSM8K, d / "a.jsonl")
    assert _read_all([str(d)]) == _rows()


def test_glob_still_expands_and_missing_glob_still_errors(tmp_path):
    shutil.copy(GSM8K, tmp_path / "a.jsonl")
    shutil.copy(GSM8K, tmp_path / "b.jsonl")
    assert _read_all([str(tmp_path / "*.jsonl")]) == _rows() * 2
    with pytest.raises(PacktoolInputError, match="glob matched no files"):
        resolve_inputs([str(tmp_path / "c[0-9].jsonl")])


# ------------------------------------------------------------------- CSV / TSV

def _write_csv(path, rows: list[dict], delimiter=",") -> None:
    import csv
    import io
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]), delimiter=delimiter)
    w.writeheader()
    w.writerows(rows)
    data = buf.getvalue().encode()
    low = str(path)
    if low.endswith(".gz"):
        path.write_bytes(gzip.compress(data))
    elif low.endswith(".zst"):
        with pa.OSFile(low, "wb") as raw, pa.CompressedOutputStream(raw, "zstd") as out:
            out.write(data)
    else:
        path.write_bytes(data)


@pytest.mark.parametrize("name,delimiter", [("gsm.csv", ","), ("gsm.tsv", "\t"), ("gsm.csv.gz", ","),
                                            ("gsm.tsv.zst", "\t")])
def test_csv_and_tsv_read_like_json_lines(tmp_path, name, delimiter):
    """GSM8K answers hold newlines and commas: quoted fields keep them."""
    p = tmp_path / name
    _write_csv(p, _rows(), delimiter)
    assert _read_all([str(p)]) == _rows()
    assert peek_columns(resolve_inputs([str(p)])[0]) == ["question", "answer"]


def test_csv_columns_are_text_and_empty_fields_are_null(tmp_path):
    p = tmp_path / "mixed.csv"
    p.write_text('id,text,score\n1,"hello, world",42\n2,,7\n3,"line one\nline two",\n')
    rows = _read_all([str(p)])
    assert rows == [{"id": "1", "text": "hello, world", "score": "42"},
                    {"id": "2", "text": None, "score": "7"},
                    {"id": "3", "text": "line one\nline two", "score": None}]
    f = resolve_inputs([str(p)])[0]
    assert next(iter_batches(f, 10, ["text", "absent"])).to_pylist()[0] == {"text": "hello, world", "absent": None}


def test_damaged_csv_is_one_line(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text('a,b\n1,2\n3,4,5\n')
    with pytest.raises(PacktoolInputError, match=r"bad\.csv.*cannot read CSV.*convert it to JSON Lines"):
        _read_all([str(p)])


def test_progress_of_compressed_csv_counts_compressed_bytes(tmp_path):
    from packtool.tokenize.csv_reader import csv_batches
    p = tmp_path / "gsm.csv.gz"
    _write_csv(p, _rows() * 20)
    seen: list[int] = []
    assert sum(b.num_rows for b in csv_batches(str(p), 64, None, read_bytes=seen.append)) == 20 * len(_rows())
    assert seen and seen == sorted(seen) and seen[-1] == p.stat().st_size
