"""The tokenizing bar always has a total (so an ETA): rows when every input stores its row
count, bytes on disk when one does not (JSON Lines, gzipped or not)."""
from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
from conftest import GPT2, GSM8K, PEPS

import packtool.tokenize.pipeline as pipeline
from packtool.tokenize import TokenizeConfig, tokenize_to_cache


def _watch(monkeypatch):
    seen = {"bytes": [], "totals": []}
    at_bytes, advance = pipeline._Progress.at_bytes, pipeline._Progress.advance

    def spy_bytes(self, n):
        seen["bytes"].append(n)
        seen["totals"].append((self.by_bytes, self.p.tasks[0].total))
        at_bytes(self, n)

    def spy_advance(self, rows, tokens):
        advance(self, rows, tokens)
        seen["totals"].append((self.by_bytes, self.p.tasks[0].total))
        seen["completed"] = self.p.tasks[0].completed

    monkeypatch.setattr(pipeline._Progress, "at_bytes", spy_bytes)
    monkeypatch.setattr(pipeline._Progress, "advance", spy_advance)
    return seen


def test_jsonl_inputs_progress_by_bytes_to_their_total(tmp_path, monkeypatch):
    seen = _watch(monkeypatch)
    cfg = TokenizeConfig(tokenizer=GPT2, prompt_field="question", response_field="answer")
    tokenize_to_cache([GSM8K, PEPS], cfg, cache_dir=str(tmp_path / "c"), progress=False)
    total = os.path.getsize(GSM8K) + os.path.getsize(PEPS)  # PEPS is gzipped: its on-disk bytes
    assert {t for t in seen["totals"]} == {(True, total)}
    assert seen["bytes"] == sorted(seen["bytes"]) and seen["bytes"][-1] == total
    assert any(0 < b < total for b in seen["bytes"])  # moved before the end


def test_inputs_that_store_their_rows_progress_by_rows(tmp_path, monkeypatch):
    path = str(tmp_path / "t.parquet")
    pq.write_table(pa.table({"text": [f"row {i} " * 5 for i in range(300)]}), path, row_group_size=50)
    seen = _watch(monkeypatch)
    tokenize_to_cache([path], TokenizeConfig(tokenizer=GPT2), cache_dir=str(tmp_path / "c"), progress=False)
    assert {t for t in seen["totals"]} == {(False, 300)} and seen["completed"] == 300
