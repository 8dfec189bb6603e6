"""A tokenized cache made before packtool counted a CSV/TSV file's blank lines (stop 38's "Left"
4): its cache.json has no `blank_lines` key for the file, and a run reusing it said nothing, which
reads as "no blank lines" where nobody counted. Now every CSV/TSV record of a new cache holds the
key (null for none), and a cache whose CSV/TSV record lacks it is stale: rebuilt once, with a note
saying why, then its blank lines said (or, none, known). The cache version stays (the key is no
part of the content: tokenize/blank_lines.py says the rule). The old form here is a cache.json
edited to drop the key, as caches made before stop 38 wrote it."""
from __future__ import annotations

import json
import os

import pytest
from conftest import GPT2
from test_blank_lines import _write  # the one writer of plain and compressed test inputs

from packtool import notes
from packtool.tokenize.cache_entry import cache_json_bytes
from packtool.tokenize.config import TokenizeConfig
from packtool.tokenize.pipeline import tokenize_to_cache

FILES = {  # the file -> its lines, and the blank-line record a count gives
    "inside.csv": (["text,n", "row 0,1", "", "row 1,2"], [1, 3]),
    "inside.tsv.gz": (["text\tn", "row 0\t1", "", "", "row 1\t2"], [2, 3]),
    "none.csv": (["text,n", "row 0,1", "row 1,2"], None),
}


def _tokenize(paths, cache_dir):
    return tokenize_to_cache([str(p) for p in paths], TokenizeConfig(tokenizer=GPT2), cache_dir=str(cache_dir),
                             progress=False)


def _to_old_form(root: str) -> None:
    """cache.json as a packtool before stop 38 wrote it: no blank_lines key in a CSV's record."""
    path = os.path.join(root, "cache.json")
    meta = json.load(open(path))
    for rec in meta["inputs"]:
        if rec.get("format") == "csv":
            rec.pop("blank_lines", None)
    with open(path, "wb") as f:  # sealed, so the missing key is what is caught (such a cache has no seal either)
        f.write(cache_json_bytes(meta))


@pytest.mark.parametrize("name", FILES)
def test_an_old_cache_that_never_counted_a_csvs_blank_lines_is_rebuilt_and_they_are_said(tmp_path, name):
    lines, record = FILES[name]
    data = tmp_path / name
    _write(data, ("\n".join(lines) + "\n").replace("\\t", "\t"))
    built = _tokenize([data], tmp_path / "cache")
    assert [r["blank_lines"] for r in built.meta["inputs"]] == [record]  # the key, null for none
    _to_old_form(built.root)
    start = notes.mark()
    again = _tokenize([data], tmp_path / "cache")
    said = notes.since(start)
    assert not again.reused, said  # not reused as if its blank lines were known
    assert any("no blank-line count" in n and name in n and "rebuilding it" in n for n in said), said
    blank = [n for n in said if "blank lines skipped" in n or "blank line skipped" in n]
    assert len(blank) == (1 if record else 0), said
    assert [r["blank_lines"] for r in again.meta["inputs"]] == [record]
    start = notes.mark()
    assert _tokenize([data], tmp_path / "cache").reused  # rebuilt once: reused from then on
    assert len([n for n in notes.since(start) if "blank line" in n]) == (1 if record else 0)


def test_an_old_cache_of_json_lines_is_reused_as_before(tmp_path):
    """JSON Lines' blank lines were counted before stop 38: its caches stay as they are."""
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "a"}\n\n{"text": "b"}\n')
    built = _tokenize([data], tmp_path / "cache")
    _to_old_form(built.root)
    assert _tokenize([data], tmp_path / "cache").reused
