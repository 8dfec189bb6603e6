"""S48A-7, RA-3: the note on a second name of a file inside one folder or glob called a file
reached through a link to its folder, or the target of a link that sorts before it, "a hard link
of" the name read; a user looking for that hard link found none. Each is said as what it is."""
from __future__ import annotations

import json
import os

import pytest

from packtool.notes import mark, since
from packtool.tokenize.readers import resolve_inputs


def _row(path) -> None:
    path.write_text(json.dumps({"text": "a"}) + "\n")


def _folder_link(d):  # `inlink -> in`: the glob `in*` matches both folders
    (d / "in").mkdir()
    _row(d / "in" / "tok.jsonl")
    os.symlink("in", d / "inlink")
    return str(d / "in*"), "link to a folder"


def _link_first(d):  # `a.jsonl -> z.jsonl`: the link sorts first; the file is read by its own name
    (d / "f").mkdir()
    _row(d / "f" / "z.jsonl")
    os.symlink("z.jsonl", d / "f" / "a.jsonl")
    return str(d / "f"), "a link to"


def _hard(d):
    (d / "f").mkdir()
    _row(d / "f" / "a.jsonl")
    os.link(d / "f" / "a.jsonl", d / "f" / "b.jsonl")
    return str(d / "f"), "a hard link"


@pytest.mark.parametrize("make", [_folder_link, _link_first, _hard])
def test_a_second_name_is_said_as_what_it_is(tmp_path, make):
    spec, want = make(tmp_path)
    start = mark()
    assert len(resolve_inputs([spec])) == 1
    said = [n for n in since(start) if "second name" in n]
    assert len(said) == 1 and want in said[0], said
    if want != "a hard link":
        assert "hard link" not in said[0], said
