"""A verify problem line says what ALL its numbers count from (S43-11, class 6): a source-token
mismatch names a shard row, a segment and a position, and ended "(rows count from 0)" alone,
leaving the segment and position numbers unsaid."""
from __future__ import annotations

import shutil

import pytest
from conftest import GPT2, GSM8K
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.cli.printing import problem_text
from packtool.verification.problems import Problem


@pytest.mark.parametrize("problem, base", [
    (Problem("source_tokens", "position 5 holds 1, the source has 2", shard="s.parquet", row=3, segment=0),
     "(rows count from 0, segments and positions too)"),
    (Problem("cu_seqlens", "cu_seqlens_padded ends at 10, not 12", shard="s.parquet", row=3),
     "(rows count from 0)"),
    (Problem("manifest", "the manifest says 3 shards"), None),
])
def test_each_number_kind_of_a_problem_line_is_based(problem, base):
    text = problem_text(problem)
    assert text.endswith(base) if base else "count from" not in text, text


def test_verify_source_mismatch_line_says_segments_and_positions_count_from_0(tmp_path):
    src = tmp_path / "gsm.jsonl"
    shutil.copy(GSM8K, src)
    flags = ["--tokenizer", GPT2, "--prompt-field", "question", "--response-field", "answer"]
    r = CliRunner().invoke(app, ["pack", str(src), *flags, "-C", "1024", "-o", str(tmp_path / "out"),
                                 "--no-progress", "--cache-dir", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    text = src.read_text()
    i = text.index("48")
    src.write_text(text[:i] + "49" + text[i + 2:])
    r = CliRunner().invoke(app, ["verify", str(tmp_path / "out"), "--source", str(src), *flags])
    assert r.exit_code == 1, r.output
    lines = [ln for ln in r.output.splitlines() if ln.startswith("✗ source_tokens")]
    assert lines and all("position" in ln and ln.endswith("(rows count from 0, segments and positions too)")
                         for ln in lines), lines
