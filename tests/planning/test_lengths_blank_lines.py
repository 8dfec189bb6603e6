"""A text lengths file is positional (row i is sequence i): a blank line before the last length,
which every parser skips, is refused naming its line (lines from 1), in each text kind; blank
lines at the end shift nothing and are read. A row's value error names its line too (S36-12)."""
from __future__ import annotations

import re

import pytest

from packtool.planning.lengths import PlanInputError, load_lengths

HEAD = {"txt": "", "csv": "length\n", "tsv": "length\n", "jsonl": "", "ndjson": ""}


def _body(kind: str, values: list) -> str:
    """One line per value; None is a blank line, a str is written as it is."""
    def one(v):
        if v is None or isinstance(v, str):
            return v or ""
        return f'{{"length": {v}}}' if kind in ("jsonl", "ndjson") else str(v)
    return HEAD[kind] + "\n".join(one(v) for v in values) + "\n"


BLANKS = {"empty": None, "spaces": "  \t", "crlf": "\r"}


@pytest.mark.parametrize("blank", BLANKS)
@pytest.mark.parametrize("kind", HEAD)
def test_a_blank_line_between_lengths_is_refused_naming_its_line(tmp_path, kind, blank):
    p = tmp_path / f"l.{kind}"
    p.write_text(_body(kind, [5, BLANKS[blank], 6]), newline="")
    with pytest.raises(PlanInputError) as e:
        load_lengths(str(p))
    line = 3 if HEAD[kind] else 2
    assert f"line {line} is empty" in str(e.value) and "(lines count from 1)" in str(e.value), str(e.value)
    assert len(str(e.value).splitlines()) == 1


@pytest.mark.parametrize("kind", HEAD)
def test_blank_lines_at_the_end_shift_nothing(tmp_path, kind):
    p = tmp_path / f"l.{kind}"
    p.write_text(_body(kind, [5, 6, None, None]))
    assert load_lengths(str(p)).tolist() == [5, 6]


@pytest.mark.parametrize("kind", HEAD)
def test_a_bad_length_names_its_row_and_line(tmp_path, kind):
    p = tmp_path / f"l.{kind}"
    p.write_text(("# sequence lengths\n" if kind == "txt" else "") + _body(kind, [5, 7, 0]))
    with pytest.raises(PlanInputError) as e:
        load_lengths(str(p))
    line = 3 if kind in ("jsonl", "ndjson") else 4  # past a header or a comment line
    assert e.value.row == 2 and re.search(rf"\bline {line}\b", str(e.value)), str(e.value)
    assert "rows count from 0, lines from 1" in str(e.value)
