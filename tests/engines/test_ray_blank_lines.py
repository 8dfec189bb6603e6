"""Blank lines inside a JSON Lines data file under `--engine ray` (issue 23's second pass): the
local engine says one note per file and keeps the count in cache.json's per-input record
(tokenize/blank_lines.py), but the Ray build read its files in tasks that did not count them:
a cache built on Ray had no note and no `blank_lines` record, and a run reusing it said nothing.
The same files under both engines now give the same notes and the same records, whichever
JSON Lines reader reads them, with a tokenize batch per few rows or per file; CSV/TSV files too."""
from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'packtool[ray]')")

from conftest import GPT2, LOCAL_RAY_GROUP  # noqa: E402

from packtool import notes  # noqa: E402
from packtool.engines.ray_engine import tokenized_cache  # noqa: E402
from packtool.tokenize.config import TokenizeConfig  # noqa: E402
from packtool.tokenize.pipeline import tokenize_to_cache  # noqa: E402

pytestmark = [pytest.mark.usefixtures("local_ray"), LOCAL_RAY_GROUP]

ROW = '{"text": "row %d"}'
# lines of each file: blank lines inside (runs, kinds, before the first row, near the end),
# after the last row only (no note), none
LAYOUTS = {
    "inside": [ROW, "", ROW, "  \t", "", ROW, "\r", ROW, ROW, ROW, "", ROW],
    "before the first row": ["", "", ROW, ROW, ROW],
    "only at the end": [ROW, ROW, ROW, "", " ", ""],
    "none": [ROW, ROW, ROW],
}
READERS = {"jsonl": ".jsonl", "a .json holding JSON Lines": ".json", "gzip": ".jsonl.gz"}


def _inputs(tmp_path, suffix: str) -> list[str]:
    paths = []
    for k, (name, lines) in enumerate(LAYOUTS.items()):
        text = "\n".join(line % (10 * k + i) if "%" in line else line for i, line in enumerate(lines)) + "\n"
        p = tmp_path / f"{name.replace(' ', '_')}{suffix}"
        p.write_bytes(gzip.compress(text.encode()) if suffix.endswith(".gz") else text.encode())
        paths.append(str(p))
    side = tmp_path / "rows.parquet"  # a file Ray reads by row groups, which has no lines
    pq.write_table(pa.table({"text": ["parquet row"] * 3}), side)
    return [*paths, str(side)]


def _said(start: int) -> list[str]:
    return [n for n in notes.since(start) if "blank line" in n]


@pytest.mark.parametrize("batch", [2, 1024], ids=["batches of 2 rows", "a batch per file"])
@pytest.mark.parametrize("reader", READERS)
def test_the_ray_build_says_and_keeps_the_blank_lines_as_the_local_build(tmp_path, reader, batch):
    inputs = _inputs(tmp_path, READERS[reader])
    cfg = TokenizeConfig(tokenizer=GPT2, batch_size=batch)
    said, records = {}, {}
    for engine, build in (("local", tokenize_to_cache), ("ray", tokenized_cache)):
        for run in ("built", "reused"):
            start = notes.mark()
            cache = build(inputs, cfg, str(tmp_path / f"cache-{engine}"), progress=False)
            assert cache.reused == (run == "reused"), (engine, run)
            said[engine, run] = _said(start)
        records[engine] = [(rec["path"], rec.get("blank_lines")) for rec in cache.meta["inputs"]]
    assert records["ray"] == records["local"]
    assert [r for _, r in records["local"]] == [[5, 2], [2, 1], None, None, None]  # the owner's counts
    assert said["ray", "built"] == said["local", "built"] == said["ray", "reused"] == said["local", "reused"]
    assert len(said["local", "built"]) == 2 and said["local", "built"][0].startswith(
        f"{inputs[0]}: 5 blank lines skipped (first at line 2; lines count from 1)"), said


CSV = ["", "text{d}n", "row 0{d}1", "", "row 1{d}2", '"a', "", 'b"{d}3', "", "row 2{d}3"]  # one quoted blank line


@pytest.mark.parametrize("name", ["d.csv", "d.tsv.zst"])
def test_csv_blank_lines_are_said_and_kept_as_the_local_build(tmp_path, name):
    """CSV/TSV (tests/tokenize/test_csv_blank_lines.py) the same: Ray reads a CSV file whole too."""
    d = "\t" if ".tsv" in name else ","
    inside, at_end = tmp_path / name, tmp_path / "at_end.csv"
    text = "\n".join(line.replace("{d}", d) for line in CSV) + "\n"
    if name.endswith(".zst"):
        with pa.CompressedOutputStream(str(inside), "zstd") as f:
            f.write(text.encode())
    else:
        inside.write_text(text)
    at_end.write_text("text,n\nrow 3,1\n\n\n")
    said, records = {}, {}
    for engine, build in (("local", tokenize_to_cache), ("ray", tokenized_cache)):
        for run in ("built", "reused"):
            start = notes.mark()
            cache = build([str(inside), str(at_end)], TokenizeConfig(tokenizer=GPT2, batch_size=2),
                          str(tmp_path / f"cache-{engine}"), progress=False)
            assert cache.reused == (run == "reused"), (engine, run)
            said[engine, run] = _said(start)
        records[engine] = [rec.get("blank_lines") for rec in cache.meta["inputs"]]
    assert records["ray"] == records["local"] == [[3, 1], None]
    assert said["ray", "built"] == said["local", "built"] == said["ray", "reused"] == said["local", "reused"]
    assert len(said["local", "built"]) == 1
