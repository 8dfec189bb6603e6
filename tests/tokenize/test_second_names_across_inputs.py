"""S48A-13, RA-3 (its other half), S48A-7 (its rest): one file under two names among a run's inputs.

- Two folder inputs sharing a hard-linked file (snapshots made with `cp -al`, rsync --link-dest) were
  refused "input given more than once (also given as d1/a.jsonl); pass each file once", a path the
  user never typed and a fix they could not follow, where one glob over both folders (or their
  parent) read it once with a note. A second name found inside folder inputs or globs, one or
  several, is now read once with the note; a path the user typed twice (the same folder twice, a
  folder and one below it, a folder and a link to it, a folder and a file in it) is still refused.
- A file reached through a link and by its own name was read and recorded under the link's name
  when the link sorted first; the real file's name is read now, wherever it sorts.
- A glob matching a packed output and a link to it counted the output twice (its files once per
  name) and by its hidden manifest a file more than a folder input or a store prefix did: one output
  is counted once, its files as every door finds them.
"""
from __future__ import annotations

import json
import os

import pytest

from packtool import notes
from packtool.errors import PacktoolInputError
from packtool.tokenize.readers import resolve_inputs


def _rows(path, n: int = 2) -> None:
    path.write_text("".join(json.dumps({"text": f"{path.name} {i}"}) + "\n" for i in range(n)))


def _snapshots(tmp_path, how: str):
    """snap/d1/a.jsonl; snap/d2/a.jsonl its second name (`how`), beside snap/d2/b.jsonl."""
    d1, d2 = tmp_path / "snap" / "d1", tmp_path / "snap" / "d2"
    d1.mkdir(parents=True)
    d2.mkdir()
    _rows(d1 / "a.jsonl")
    _rows(d2 / "b.jsonl")
    if how == "a hard link":
        os.link(d1 / "a.jsonl", d2 / "a.jsonl")
    else:
        os.symlink(os.path.join("..", "d1", "a.jsonl"), d2 / "a.jsonl")
    return str(d1), str(d2)


DOORS = {  # two inputs over the two snapshots, as a user types them
    "two folders": lambda d1, d2: [d1, d2],
    "two globs": lambda d1, d2: [os.path.join(d1, "*.jsonl"), os.path.join(d2, "*.jsonl")],
    "two ** globs": lambda d1, d2: [os.path.join(d1, "**", "*.jsonl"), os.path.join(d2, "**", "*.jsonl")],
    "a folder and a glob": lambda d1, d2: [d1, os.path.join(d2, "*.jsonl")],
    "one glob (as before)": lambda d1, d2: [os.path.join(os.path.dirname(d1), "d*")],
    "their parent (as before)": lambda d1, d2: [os.path.dirname(d1)],
}


@pytest.mark.parametrize("how", ["a hard link", "a link"])
@pytest.mark.parametrize("door", DOORS)
def test_a_second_name_in_another_folder_input_is_read_once(tmp_path, door, how):
    d1, d2 = _snapshots(tmp_path, how)
    start = notes.mark()
    got = [f.path for f in resolve_inputs(DOORS[door](d1, d2))]
    assert got == [os.path.join(d1, "a.jsonl"), os.path.join(d2, "b.jsonl")], got
    said = [n for n in notes.since(start) if "second name" in n]
    assert len(said) == 1 and os.path.join(d2, "a.jsonl") in said[0], notes.since(start)
    assert f"{how} " in said[0] and os.path.join(d1, "a.jsonl") in said[0], said[0]


# RA-1: a file typed by its path, its second name found in a folder or glob input (snap/d1/a.jsonl typed,
# snap/d2 a `cp -al` of it) was "input given more than once (also given as d1/a.jsonl); pass each file
# once": a path the user never typed. Read once, by the typed name, in either order of the inputs.
FOUND = {"a folder": lambda d2: d2, "a glob": lambda d2: os.path.join(d2, "*.jsonl"),
         "a ** glob": lambda d2: os.path.join(d2, "**", "*.jsonl")}


@pytest.mark.parametrize("first", ["the file first", "the file last"])
@pytest.mark.parametrize("how", ["a hard link", "a link"])
@pytest.mark.parametrize("found", FOUND)
def test_a_second_name_of_a_typed_file_found_in_another_input_is_read_once(tmp_path, found, how, first):
    d1, d2 = _snapshots(tmp_path, how)
    typed = os.path.join(d1, "a.jsonl")
    given = [typed, FOUND[found](d2)] if first == "the file first" else [FOUND[found](d2), typed]
    start = notes.mark()
    got = [f.path for f in resolve_inputs(given)]
    want = [typed, os.path.join(d2, "b.jsonl")]
    assert got == (want if first == "the file first" else want[::-1]), got
    said = [n for n in notes.since(start) if "second name" in n]
    assert len(said) == 1 and f"{os.path.join(d2, 'a.jsonl')} ({how} " in said[0] and typed in said[0], said


TYPED_TWICE = {  # the user typed one path twice: refused, whatever lies inside
    "the same folder twice": lambda t: [t / "d", t / "d"],
    "a folder and one below it": lambda t: [t / "d", t / "d" / "sub"],
    "a folder and a link to it": lambda t: [t / "d", t / "dlink"],
    "a folder and a glob over it": lambda t: [t / "d", t / "d" / "**" / "*.jsonl"],
    "a folder and a file in it": lambda t: [t / "d", t / "d" / "sub" / "x.jsonl"],
    "a file and a link to it": lambda t: [t / "d" / "sub" / "x.jsonl", t / "xlink.jsonl"],
    "a file in a folder, after it": lambda t: [t / "d" / "sub" / "x.jsonl", t / "d"],
    "a link to a file in a folder": lambda t: [t / "xlink.jsonl", t / "d"],
    "a file through a link to its folder": lambda t: [t / "d", t / "dlink" / "sub" / "x.jsonl"],
    "a file and a glob over it": lambda t: [t / "d" / "sub" / "x.jsonl", t / "d" / "sub" / "*.jsonl"],
}


@pytest.mark.parametrize("given", TYPED_TWICE)
def test_a_path_typed_twice_is_still_refused(tmp_path, given):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    _rows(tmp_path / "d" / "sub" / "x.jsonl")
    os.symlink("d", tmp_path / "dlink")
    os.symlink(os.path.join("d", "sub", "x.jsonl"), tmp_path / "xlink.jsonl")
    with pytest.raises(PacktoolInputError, match="more than once.*pass each file once"):
        resolve_inputs([str(p) for p in TYPED_TWICE[given](tmp_path)])


def _link_first(d):  # `a.jsonl -> z.jsonl`: the link sorts before the file
    _rows(d / "z.jsonl")
    os.symlink("z.jsonl", d / "a.jsonl")
    return "z.jsonl", "a.jsonl", "a link to"


def _link_after(d):
    _rows(d / "a.jsonl")
    os.symlink("a.jsonl", d / "z.jsonl")
    return "a.jsonl", "z.jsonl", "a link to"


def _folder_link_first(d):  # `a -> z`, a link to a folder beside it, sorting first (a `**` walk)
    (d / "z").mkdir()
    _rows(d / "z" / "x.jsonl")
    os.symlink("z", d / "a")
    return os.path.join("z", "x.jsonl"), os.path.join("a", "x.jsonl"), "reached through a link"


def _hard(d):
    _rows(d / "a.jsonl")
    os.link(d / "a.jsonl", d / "z.jsonl")
    return "a.jsonl", "z.jsonl", "a hard link of"


SPECS = {"folder": lambda d: str(d), "** glob": lambda d: os.path.join(d, "**", "*.jsonl"),
         "glob over the folders": lambda d: os.path.join(d, "*")}


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("make", [_link_first, _link_after, _folder_link_first, _hard])
def test_the_name_read_is_the_files_own(tmp_path, make, spec):
    d = tmp_path / "d"
    d.mkdir()
    read, dropped, words = make(d)
    start = notes.mark()
    got = [f.path for f in resolve_inputs([SPECS[spec](d)])]
    assert got == [str(d / read)], got
    said = [n for n in notes.since(start) if "second name" in n or "did not follow" in n]
    # a link to a folder already walked is not followed by a `**` walk (its own note, local_walk)
    assert len(said) == 1 and str(d / dropped.split(os.sep)[0]) in said[0], notes.since(start)
    if "did not follow" not in said[0]:
        assert f"{d / dropped} ({words}" in said[0], said[0]


def _packed(where) -> None:  # an output by packtool's proof: a manifest beside a shard name
    where.mkdir(parents=True)
    (where / ".manifest.json").write_text("{}")
    (where / "slabs-00000.parquet").write_bytes(b"PAR1")


OUTPUT_DOORS = {"folder": lambda d: str(d), "glob": lambda d: os.path.join(d, "*"),
                "** glob": lambda d: os.path.join(d, "**", "*.*"), "store prefix": lambda d: f"file://{d}"}


@pytest.mark.parametrize("door", OUTPUT_DOORS)
@pytest.mark.parametrize("linked", [False, True], ids=["alone", "and a link to it"])
def test_a_packed_output_is_counted_once_alike_at_every_door(tmp_path, door, linked):
    d = tmp_path / "gw"
    d.mkdir()
    _rows(d / "s.jsonl")
    _packed(d / "real")
    if linked:
        os.symlink("real", d / "alink")  # sorts before it
    start = notes.mark()
    assert [os.path.basename(f.path) for f in resolve_inputs([OUTPUT_DOORS[door](d)])] == ["s.jsonl"]
    said = [n for n in notes.since(start) if "packtool's own folders" in n]
    assert len(said) == 1, notes.since(start)
    assert "passed over 1 file " in said[0] and "real (a packed output, 1 file)" in said[0], said[0]
    assert "alink" not in said[0] or "did not follow" in said[0], said[0]


# RA-10: the library resolved paths mixed with objects twice (once for the checks, once per path):
# every note of the resolution said twice, and a file two path inputs share read twice.
def _readme(d):
    (d / "README.md").write_text("about")
    return "passed over 1 file of a kind"


def _shared(d):
    os.link(d / "a.jsonl", d.parent / "e" / "a.jsonl")
    return "second name"


def _output(d):
    _packed(d / "real")
    return "packtool's own folders"


def _folder_link(d):
    os.symlink(".", d / "loop")
    return "did not follow"


@pytest.mark.parametrize("make", [_readme, _shared, _output, _folder_link])
def test_paths_beside_objects_are_resolved_once(tmp_path, make):
    pa = pytest.importorskip("pyarrow")
    from packtool.tokenize.hf_input import ArrowSource, resolve_sources
    d, e = tmp_path / "d", tmp_path / "e"
    d.mkdir()
    e.mkdir()
    _rows(d / "a.jsonl")
    _rows(e / "b.jsonl")
    words = make(d)
    start = notes.mark()
    got = resolve_sources([str(d), pa.table({"text": ["x"]}), str(e)])
    assert [None if isinstance(f, ArrowSource) else f.path for f in got] == [
        str(d / "a.jsonl"), None, str(e / "b.jsonl")], got
    said = [n for n in notes.since(start) if words in n]
    assert len(said) == 1, notes.since(start)
