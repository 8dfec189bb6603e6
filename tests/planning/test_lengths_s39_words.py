"""S39-7 (issue 23 class 6): `--lengths` said what a file holds wrongly in three places.
An integer too large for a length was "whole numbers but not integers" in JSON Lines (Arrow
reads 10^20 as a double) and "holds '1000...': a .txt file holds one integer length per line"
in .txt, with no row; a leading UTF-8 BOM (a Notepad-saved file) was refused in .txt though the
CSV, TSV and JSON Lines readers skip it; an empty file was "no lengths" (no flag, no fix). Each
is tested over every text kind (and every kind for the empty file), plus the finding's example."""
from __future__ import annotations


import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.errors import EXIT_USAGE
from packtool.planning.lengths import PlanInputError, load_lengths

BIG = 99999999999999999999
BOM = b"\xef\xbb\xbf"


def _text(kind: str, values: list) -> bytes:
    """`values` as a lengths file of `kind` (header rows where the kind has one)."""
    if kind == "txt":
        lines = [str(v) for v in values]
    elif kind in ("csv", "tsv"):
        lines = ["length", *map(str, values)]
    else:  # jsonl, ndjson; a JSON number written as the Python int / float prints it
        lines = [f'{{"length": {v}}}' for v in values]
    return "".join(line + "\n" for line in lines).encode()


TEXT_KINDS = ["txt", "csv", "tsv", "jsonl", "ndjson"]


def _refused(path) -> PlanInputError:
    with pytest.raises(PlanInputError) as e:
        load_lengths(str(path))
    assert "\n" not in str(e.value), str(e.value)
    return e.value


@pytest.mark.parametrize("kind", TEXT_KINDS)
@pytest.mark.parametrize("big", [BIG, -BIG, 2**63], ids=["10^20", "-10^20", "2^63"])
def test_an_integer_beyond_a_length_is_the_range_at_its_row_and_line(tmp_path, kind, big):
    p = tmp_path / f"l.{kind}"
    p.write_bytes(_text(kind, [100, big]))
    e = _refused(p)
    line = 3 if kind in ("csv", "tsv") else 2
    assert e.row == 1 and f"line {line}: {big} tokens, outside 1..2^62" in str(e), str(e)


@pytest.mark.parametrize("kind", ["jsonl", "ndjson"])
@pytest.mark.parametrize("written,said", [("100.0", "whole numbers but not integers"), ("1.5", "value 1.5 at line 2")])
def test_a_json_number_with_a_point_keeps_its_words(tmp_path, kind, written, said):
    """the double column's other case (a guard, not the finding): a number written with a
    point is the type's fault, even beside an integer too large."""
    p = tmp_path / f"l.{kind}"
    p.write_text(f'{{"length": 100}}\n{{"length": {written}}}\n{{"length": {BIG}}}\n')
    assert said in str(_refused(p))


@pytest.mark.parametrize("kind", TEXT_KINDS)
def test_a_leading_bom_is_skipped_by_every_text_kind(tmp_path, kind):
    p = tmp_path / f"l.{kind}"
    p.write_bytes(BOM + _text(kind, [100, 200]))
    assert load_lengths(str(p)).tolist() == [100, 200]


def test_a_bad_line_after_a_bom_is_still_named_at_its_line(tmp_path):
    p = tmp_path / "l.txt"
    p.write_bytes(BOM + b"100\nabc\n")
    e = _refused(p)
    assert e.row == 1 and "line 2 holds 'abc'" in str(e), str(e)


def _empty(tmp_path, kind: str):
    p = tmp_path / f"e.{kind}"
    if kind == "npy":
        np.save(p, np.array([], np.int64))
    elif kind == "parquet":
        pq.write_table(pa.table({"length": pa.array([], pa.int64())}), p)
    elif kind == "arrow":
        feather.write_feather(pa.table({"length": pa.array([], pa.int64())}), str(p))
    else:
        p.write_bytes(_text(kind, []))
    return p


@pytest.mark.parametrize("kind", [*TEXT_KINDS, "npy", "parquet", "arrow"])
def test_an_empty_lengths_file_says_so_with_the_fix(tmp_path, kind):
    e = _refused(_empty(tmp_path, kind))
    assert str(e).startswith(f"{tmp_path / f'e.{kind}'}: holds no lengths (0 entries): give lengths a file of one "
                             f"length per sequence"), str(e)


runner = CliRunner()


def test_s39_7_the_findings_files(tmp_path):
    big = tmp_path / "big.jsonl"
    big.write_text('{"length": 100}\n{"length": 99999999999999999999}\n')
    bom = tmp_path / "bom.txt"
    bom.write_bytes(BOM + b"100\n200\n")
    e = tmp_path / "e.npy"
    np.save(e, np.array([], np.int64))
    r = runner.invoke(app, ["plan", "--lengths", str(big), "-C", "1024"])
    assert r.exit_code == EXIT_USAGE and r.stderr.strip().splitlines() == [
        f"error: {big}, row 1: line 2: 99999999999999999999 tokens, outside 1..2^62: --lengths takes integers from "
        f"1 to 2^62 (one length per sequence) (rows count from 0, lines from 1)"], r.stderr
    assert runner.invoke(app, ["plan", "--lengths", str(bom), "-C", "1024"]).exit_code == 0
    r = runner.invoke(app, ["plan", "--lengths", str(e)])
    assert r.exit_code == EXIT_USAGE and r.stderr.strip().splitlines() == [
        f"error: {e}: holds no lengths (0 entries): give --lengths a file of one length per sequence"], r.stderr
    assert not list(tmp_path.glob("*.parquet"))
