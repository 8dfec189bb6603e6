"""Issue 23 class 5 (S28-3): a file with the columns of two known input shapes (text beside
question/answer) was packed as the first by precedence, the other's content dropped without a
word. Auto detection now refuses it in one line naming both shapes and the argument that picks
one (CLI and library, JSON Lines and Parquet, before anything is written); with an explicit
choice it packs, and the columns of the other shape are said in a note, as not read."""
from __future__ import annotations

import itertools
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import GPT2
from leftover_support import snapshot
from shape_rows import SHAPES
from test_bad_inputs import expect_error, leftovers, runner

import packtool
from packtool.align import Alignment
from packtool.cli.app import app
from packtool.errors import PacktoolInputError
from packtool.tokenize import TokenizeConfig

PAIRS = list(itertools.combinations(SHAPES, 2))
CHOOSE_CLI = {k: ["--shape", k] for k in SHAPES} | {"fields": ["--prompt-field", "question", "--response-field", "answer"]}
CHOOSE_LIB = {k: {"shape": k} for k in SHAPES} | {"fields": {"prompt_field": "question", "response_field": "answer"}}
SAID_CLI = {k: f"--shape {k}" for k in SHAPES} | {"fields": "--prompt-field question --response-field answer"}
SAID_LIB = {k: f"shape='{k}'" for k in SHAPES} | {"fields": "prompt_field='question' response_field='answer'"}


def _data(tmp_path, a: str, b: str, fmt: str) -> str:
    row = {**SHAPES[a], **SHAPES[b]}
    path = tmp_path / f"data.{fmt}"
    if fmt == "jsonl":
        path.write_text(json.dumps(row) + "\n")
    else:
        pq.write_table(pa.Table.from_pylist([row]), path)
    return str(path)


def _cli_args(tmp_path, data, *extra):
    return ["pack", data, "--tokenizer", GPT2, "--chat-template", "chatml", "-C", "256", "-o",
            str(tmp_path / "out"), "--no-progress", "--cache-dir", str(tmp_path / "cache"), *extra]


def _lib(tmp_path, data, **choice):
    cfg = TokenizeConfig(tokenizer=GPT2, chat_template="chatml", **choice)
    return packtool.pack([data], Alignment(capacity=256), tokenize=cfg, output=str(tmp_path / "out"),
                         cache_dir=str(tmp_path / "cache"))


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
@pytest.mark.parametrize("a,b", PAIRS)
class TestTwoShapesRefused:
    def test_cli(self, tmp_path, a, b, fmt):
        data = _data(tmp_path, a, b, fmt)
        line = expect_error(tmp_path, _cli_args(tmp_path, data), 2, data, f"{a} (", f"{b} (",
                            SAID_CLI[a], SAID_CLI[b], json_out=False)
        assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists(), line

    def test_library(self, tmp_path, a, b, fmt):
        data = _data(tmp_path, a, b, fmt)
        before = snapshot(tmp_path)
        with pytest.raises(PacktoolInputError) as e:
            _lib(tmp_path, data)
        msg = str(e.value)
        assert "\n" not in msg and SAID_LIB[a] in msg and SAID_LIB[b] in msg and "--" not in msg, msg
        assert snapshot(tmp_path) == before and leftovers(tmp_path) == []
        assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("a,b", PAIRS)
@pytest.mark.parametrize("pick", [0, 1])
class TestExplicitChoicePacks:
    """The chosen shape packs; the other's columns are named in a note (stderr, and
    pipeline.NOTES for library callers), as packtool says of nothing else it leaves out."""

    def test_cli(self, tmp_path, a, b, pick):
        chosen, other = (a, b) if pick == 0 else (b, a)
        data = _data(tmp_path, a, b, "jsonl")
        r = runner.invoke(app, _cli_args(tmp_path, data, *CHOOSE_CLI[chosen]))
        assert r.exit_code == 0, r.stdout + r.stderr
        notes = [ln for ln in r.stderr.splitlines() if "not read" in ln]
        assert len(notes) == 1 and f"(shape {other})" in notes[0] and f"as shape {chosen}" in notes[0], r.stderr
        assert all(c in notes[0] for c in SHAPES[other]), notes

    def test_library(self, tmp_path, a, b, pick, capsys):
        chosen, other = (a, b) if pick == 0 else (b, a)
        res = _lib(tmp_path, _data(tmp_path, a, b, "parquet"), **CHOOSE_LIB[chosen])
        assert os.path.isdir(res.output if hasattr(res, "output") else tmp_path / "out")
        notes = [ln for ln in capsys.readouterr().err.splitlines() if "not read" in ln]
        assert len(notes) == 1 and f"(shape {other})" in notes[0], notes


def test_one_shape_with_unknown_columns_still_packs_without_a_word(tmp_path):
    """Columns of no known shape (an id, a source url) stay as they were: not read, not noted."""
    data = tmp_path / "docs.jsonl"
    data.write_text(json.dumps({"text": "a plain document", "id": 3, "url": "u"}) + "\n")
    r = runner.invoke(app, _cli_args(tmp_path, str(data)))
    assert r.exit_code == 0 and "not read" not in r.stderr, r.stdout + r.stderr
