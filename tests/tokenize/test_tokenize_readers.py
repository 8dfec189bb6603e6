"""Readers: every input format yields the same rows, streamed in bounded batches; bad files
fail with one line naming the file (and line/row where there is one)."""
from __future__ import annotations

import gzip
import json
import os

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest
from conftest import ALPACA, GSM8K, TASKMASTER

from packtool.errors import PacktoolInputError
from packtool.tokenize.readers import count_rows, iter_batches, peek_columns, resolve_inputs


def _gsm8k_rows() -> list[dict]:
    with open(GSM8K) as f:
        return [json.loads(line) for line in f]


def _read_all(paths, batch_size=37, columns=None) -> list[dict]:
    rows = []
    for f in resolve_inputs(paths):
        for b in iter_batches(f, batch_size, columns):
            assert b.num_rows <= batch_size
            rows += b.to_pylist()
    return rows


def _write_hf_folder(folder, table: pa.Table, shards: int = 2) -> None:
    """The layout `datasets.Dataset.save_to_disk` writes: IPC *stream* shards + json metadata."""
    os.makedirs(folder)
    n = table.num_rows
    names = []
    for k in range(shards):
        name = f"data-{k:05d}-of-{shards:05d}.arrow"
        part = table.slice(k * n // shards, (k + 1) * n // shards - k * n // shards)
        with ipc.new_stream(os.path.join(folder, name), table.schema) as w:
            for b in part.to_batches(max_chunksize=50):
                w.write_batch(b)
        names.append({"filename": name})
    with open(os.path.join(folder, "state.json"), "w") as f:
        json.dump({"_data_files": names, "_fingerprint": "x", "_format_type": None, "_split": "train"}, f)
    with open(os.path.join(folder, "dataset_info.json"), "w") as f:
        json.dump({"features": {c: {"dtype": "string", "_type": "Value"} for c in table.column_names}}, f)


def test_jsonl_parquet_arrow_hf_folder_agree(tmp_path):
    rows = _gsm8k_rows()
    table = pa.Table.from_pylist(rows)
    pq.write_table(table.slice(0, 120), tmp_path / "a.parquet", row_group_size=50)
    pq.write_table(table.slice(120), tmp_path / "b.parquet", row_group_size=50)
    os.makedirs(tmp_path / "pqdir")
    pq.write_table(table.slice(0, 120), tmp_path / "pqdir" / "part-0.parquet")
    pq.write_table(table.slice(120), tmp_path / "pqdir" / "part-1.parquet")
    with gzip.open(tmp_path / "g.jsonl.gz", "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    feather.write_feather(table, tmp_path / "t.feather")  # Arrow IPC file format
    with ipc.new_stream(str(tmp_path / "s.arrow"), table.schema) as w:  # IPC stream format
        w.write_table(table, max_chunksize=64)
    _write_hf_folder(str(tmp_path / "hf"), table)

    assert _read_all([GSM8K]) == rows
    assert _read_all([str(tmp_path / "*.parquet")]) == rows          # glob, sorted
    assert _read_all([str(tmp_path / "pqdir")]) == rows              # folder
    assert _read_all([str(tmp_path / "g.jsonl.gz")]) == rows
    assert _read_all([str(tmp_path / "t.feather")]) == rows
    assert _read_all([str(tmp_path / "s.arrow")]) == rows
    assert _read_all([str(tmp_path / "hf")]) == rows
    f = resolve_inputs([str(tmp_path / "hf")])
    assert [x.kind for x in f] == ["arrow", "arrow"]
    assert count_rows(resolve_inputs([str(tmp_path / "a.parquet")])[0]) == 120


def test_json_array_and_projection(tmp_path):
    with open(ALPACA) as f:
        rows = json.load(f)
    got = _read_all([ALPACA], batch_size=64)
    assert got == rows
    assert peek_columns(resolve_inputs([ALPACA])[0]) == ["instruction", "input", "response"]
    proj = _read_all([ALPACA], columns=["response"])
    assert proj == [{"response": r["response"]} for r in rows]
    # a .json file that holds JSON Lines is read as JSON Lines
    p = tmp_path / "lines.json"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows[:10]))
    assert _read_all([str(p)]) == rows[:10]


def test_jsonl_streams_in_blocks(monkeypatch, tmp_path):
    """Force tiny byte blocks: rows that straddle blocks are still read exactly once, in order."""
    import packtool.tokenize.text_readers as text_readers
    monkeypatch.setattr(text_readers, "_JSONL_BLOCK", 997)
    with gzip.open(TASKMASTER, "rt") as f:
        rows = [json.loads(line) for line in f][:40]
    p = tmp_path / "tm.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = _read_all([str(p)], batch_size=7)
    assert [r["id"] for r in got] == [r["id"] for r in rows]
    assert len(got[0]["messages"]) == len(rows[0]["messages"])


def test_invalid_utf8_names_file_and_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_bytes(b'{"text": "ok"}\n{"text": "fine"}\n{"text": "bro\xffken"}\n')
    with pytest.raises(PacktoolInputError, match=r"bad\.jsonl: invalid UTF-8 at line 3"):
        _read_all([str(p)])


def test_invalid_json_names_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"text": "ok"}\n{"text": oops}\n')
    with pytest.raises(PacktoolInputError, match="invalid JSON at line 2"):
        _read_all([str(p)])


def test_corrupt_parquet(tmp_path):
    good = tmp_path / "good.parquet"
    pq.write_table(pa.table({"text": ["a"] * 100}), good)
    data = good.read_bytes()
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(PacktoolInputError, match=r"bad\.parquet"):
        _read_all([str(bad)])
    with pytest.raises(PacktoolInputError, match=r"bad\.parquet"):
        peek_columns(resolve_inputs([str(bad)])[0])


def test_missing_and_unknown_inputs(tmp_path):
    with pytest.raises(PacktoolInputError, match="not found"):
        resolve_inputs([str(tmp_path / "nope.jsonl")])
    with pytest.raises(PacktoolInputError, match="glob matched no files"):
        resolve_inputs([str(tmp_path / "*.parquet")])
    (tmp_path / "x.xlsx").write_bytes(b"PK not a csv")
    with pytest.raises(PacktoolInputError, match="unknown file type"):
        resolve_inputs([str(tmp_path / "x.xlsx")])
    os.makedirs(tmp_path / "dd" / "train")
    (tmp_path / "dd" / "dataset_dict.json").write_text('{"splits": ["train"]}')
    with pytest.raises(PacktoolInputError, match="one split folder instead: train"):
        resolve_inputs([str(tmp_path / "dd")])
