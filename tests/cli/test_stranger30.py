"""Stranger trial 30, the usage and where-in-the-file classes:
S30-5: every path that reads a CSV/TSV names the line of the record it could not take (pack's
first look at the columns said only Arrow's `Expected 2 columns, got 3`), and a lengths column
that is not integers names its row (and line).
S30-1: `packtool --json bogus` blamed --json, the one valid flag, instead of `bogus`.
S30-2: a required flag left out (`pack` without -o or --dry-run, raw text without --tokenizer) is
a usage error (kind usage, the command's --help), as click's own `Missing option` is; a value
out of its range (`--tp 0`) stays kind config (README).
S30-3: click's `(Possible options: --help)` for a flag of another command is noise."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import GPT2
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.errors import PacktoolError
from packtool.planning.lengths import load_lengths
from packtool.tokenize.readers import InputFile, iter_batches, peek_columns

runner = CliRunner()


def _one_line(r) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in r.output and len(lines) == 1 and lines[0].startswith("error: "), r.output
    return lines[0]


# --- S30-5: CSV/TSV records name their line --------------------------------------------------

BAD_TABLES = {"csv": "text,other\nhello,1\nworld,2,3\n", "tsv": "text\tother\nhello\t1\nworld\t2\t3\n",
              "quoted": 'text,other\n"two\nlines",1\nworld,2,3\n'}  # the bad record starts at line 4


def _bad(tmp_path, name):
    ext = "tsv" if name == "tsv" else "csv"
    p = tmp_path / f"bad.{ext}"
    p.write_text(BAD_TABLES[name])
    return str(p), 4 if name == "quoted" else 3


READS = {"peek_columns": lambda f: peek_columns(f), "iter_batches": lambda f: list(iter_batches(f, 64)),
         "iter_batches_counting": lambda f: list(iter_batches(f, 64, read_bytes=lambda n: None))}


@pytest.mark.parametrize("name", BAD_TABLES)
@pytest.mark.parametrize("read", READS)
def test_every_csv_read_names_the_line(tmp_path, name, read):
    path, line = _bad(tmp_path, name)
    with pytest.raises(PacktoolError) as e:
        READS[read](InputFile(path, "csv"))
    assert f"at line {line}" in str(e.value) and e.value.row == 1, str(e.value)


@pytest.mark.parametrize("name", BAD_TABLES)
def test_pack_of_a_bad_csv_names_the_line(tmp_path, name):
    path, line = _bad(tmp_path, name)
    r = runner.invoke(app, ["pack", path, "--tokenizer", GPT2, "--dry-run", "-q", "--json",
                            "--cache-dir", str(tmp_path / "cache")])
    assert r.exit_code == 2 and f"at line {line}" in _one_line(r), r.output
    assert json.loads(r.stdout)["error"]["row"] == 1


LENGTHS = {  # file name -> (content, bad row, its line or None)
    "l.csv": ("length\n5\nx\n7\n", 1, 3), "f.csv": ("length\n5\n6.5\n7\n", 1, 3),
    "l.tsv": ("id\tlength\n0\t5\n1\t6\n2\tmany\n", 2, 4), "headerless.csv": ("5\n6\nx\n", 2, 3),
    "l.parquet": (pa.table({"length": ["5", "x"]}), None, None),  # a text column: its type named, no row "l.jsonl": ('{"length": 1.5}\n', 0, None),
}


@pytest.mark.parametrize("name", LENGTHS)
def test_lengths_that_are_not_integers_name_their_row(tmp_path, name):
    content, row, line = LENGTHS[name]
    p = tmp_path / name
    pq.write_table(content, p) if isinstance(content, pa.Table) else p.write_text(content)
    with pytest.raises(PacktoolError) as e:
        load_lengths(str(p))
    assert e.value.row == row and "integer" in str(e.value), str(e.value)
    if line is not None:
        assert f"line {line}:" in str(e.value), str(e.value)


# --- S30-1: top-level --json with no command ---------------------------------------------------

@pytest.mark.parametrize("argv,said,flag", [(["bogus"], "No such command 'bogus'", None),
                                            (["--bogus"], "No such option: --bogus", "--bogus"),
                                            (["--bogus", "pack"], "No such option: --bogus", "--bogus"),
                                            ([], "Missing command", None)])
def test_top_level_json_names_what_is_wrong(argv, said, flag):
    r = runner.invoke(app, ["--json", *argv], prog_name="packtool")
    line = _one_line(r)
    assert r.exit_code == 2 and said in line and "--json" not in line, line
    err = json.loads(r.stdout)["error"]
    assert err["kind"] == "usage" and err["flag"] == flag and line.endswith("(see `packtool --help`)")


# --- S30-2: a required flag left out is a usage error; a value out of range is config ----------

@pytest.fixture
def files(tmp_path):
    np.save(tmp_path / "len.npy", np.array([5, 6, 7]))
    (tmp_path / "d.jsonl").write_text('{"text": "hi"}\n')
    return tmp_path


MISSING = {"output": (["pack", "len.npy"], "--output"),
           "output-raw": (["pack", "d.jsonl", "--tokenizer", GPT2], "--output"),
           "tokenizer": (["pack", "d.jsonl", "--dry-run"], "--tokenizer")}


@pytest.mark.parametrize("case", MISSING)
@pytest.mark.parametrize("json_first", [False, True])
def test_a_required_flag_left_out_is_a_usage_error(files, monkeypatch, case, json_first):
    monkeypatch.chdir(files)
    argv, flag = MISSING[case]
    r = runner.invoke(app, ["--json", *argv] if json_first else [*argv, "--json"], prog_name="packtool")
    line = _one_line(r)
    err = json.loads(r.stdout)["error"]
    assert r.exit_code == 2 and line.endswith("(see `packtool pack --help`)"), line
    assert err["kind"] == "usage" and err["flag"] == flag, err


@pytest.mark.parametrize("argv", [["--tp", "0"], ["--cp", "-1"], ["-C", "-5"]])
def test_a_value_out_of_its_range_stays_config(files, monkeypatch, argv):
    monkeypatch.chdir(files)
    r = runner.invoke(app, ["plan", "--lengths", "len.npy", *argv, "--json"], prog_name="packtool")
    assert r.exit_code == 2 and json.loads(r.stdout)["error"]["kind"] == "config", r.output


# --- S30-3: no `(Possible options: --help)` -------------------------------------------------------

@pytest.mark.parametrize("cmd,args", [("verify", ["out", "--tp", "2"]), ("verify", ["out", "--cp", "2"])])
def test_no_suggestion_that_is_only_help(cmd, args):
    line = _one_line(runner.invoke(app, [cmd, *args], prog_name="packtool"))
    assert "No such option" in line and "Possible options: --help)" not in line, line


def test_real_suggestions_stay():
    line = _one_line(runner.invoke(app, ["plan", "--lengths", "x.npy", "--tpx", "2"], prog_name="packtool"))
    assert "Possible options:" in line and "--tp" in line, line
