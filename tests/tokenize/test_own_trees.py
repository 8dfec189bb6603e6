"""S32-11 (rest): packtool's own trees inside a data folder are not data. A tokenized cache
entry (complete or set aside as damaged) or a packed output (current or legacy manifest name)
below a folder input, or below a glob's fixed part, was read as rows: `pack data` then failed
on cache.json ("cannot tell the input shape") or took an output's slabs for input. Every
folder-expanding reader (readers.resolve_inputs, their one owner) passes them over with one
counted note naming each; a tree named itself is still read as asked."""
from __future__ import annotations

import os
import shutil

import pytest
from conftest import GPT2, gsm8k_packed
from typer.testing import CliRunner

import packtool
from packtool import notes
from packtool.cli.app import app
from packtool.tokenize import TokenizeConfig, tokenize_to_cache
from packtool.tokenize.readers import resolve_inputs

runner = CliRunner()


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A real packed output and cache entry of ten rows, copied into each case's data folder."""
    t = tmp_path_factory.mktemp("own")
    gsm8k_packed(t, 10, "good", "-o", str(t / "out"), "--cache-dir", str(t / "c"))
    (entry,) = os.listdir(t / "c")
    torch = pytest.importorskip("torch")
    from packtool.checkpoint_kind import KEYS
    (t / "ckpt").mkdir()
    torch.save(dict.fromkeys(KEYS, 0), t / "ckpt" / "mp_rank_00.pt")  # what train --save writes, by its keys
    return t, str(t / "c" / entry)


def _legacy(out):
    os.rename(os.path.join(out, ".manifest.json"), os.path.join(out, "manifest.json"))


TREES = {  # where in the data folder, made from what, then changed how
    "cache entry": ("cache/{entry}", "entry", None),
    "cache entry beside the data": ("{entry}", "entry", None),  # the old `--cache-dir data`
    "damaged cache entry": ("cache/{entry}.damaged-123", "entry", None),
    "packed output": ("packed", "out", None),
    "packed output, legacy manifest": ("sub/packed", "out", _legacy),
    # RA-15: its mp_rank_00.pt was refused as "data packtool cannot read ... decompress or convert"
    "train checkpoint": ("run/ckpt-1", "ckpt", None),
}


def _data(tmp_path, made, tree, linked=False) -> tuple[str, str]:
    """(the data folder, where the tree is found in it). `linked` (S46A-9): the tree lies outside
    the folder and the folder's first step towards it is a symbolic link (`prev -> ../out`, a
    shared cache root linked into a project, a folder holding an output)."""
    t, entry = made
    where, src, change = TREES[tree]
    d = tmp_path / "data"
    d.mkdir()
    shutil.copy(t / "good" / "s.jsonl", d / "s.jsonl")
    where = where.format(entry=os.path.basename(entry))
    dest = str(d / where)
    made_at = str(tmp_path / "elsewhere" / where) if linked else dest
    shutil.copytree(entry if src == "entry" else str(t / src), made_at)
    if change:
        change(made_at)
    if linked:
        first = where.split("/")[0]
        os.symlink(tmp_path / "elsewhere" / first, d / first)
    return str(d), dest


def _resolved(spec, t):
    files = [os.path.basename(f.path) for f in resolve_inputs([spec])]
    assert files == ["s.jsonl"], files


def _verify_source(spec, t):
    r = runner.invoke(app, ["verify", str(t / "out"), "--source", spec, "-q", "--cache-dir", str(t / "v")])
    assert r.exit_code == 0, r.output
    return r.stderr


ENTRIES = {
    "resolve_inputs": _resolved,
    "tokenize_to_cache": lambda spec, t: tokenize_to_cache([spec], TokenizeConfig(tokenizer=GPT2), str(t / "v"),
                                                           progress=False).num_rows == 10 or pytest.fail("rows"),
    "library pack": lambda spec, t: packtool.pack([spec], tokenize=TokenizeConfig(tokenizer=GPT2), dry_run=True,
                                                  cache_dir=str(t / "v")).summary.sequences == 10
    or pytest.fail("rows"),
    "cli pack": lambda spec, t: _cli_pack(spec, t),
    "cli verify --source": _verify_source,
}


def _cli_pack(spec, t):
    r = runner.invoke(app, ["pack", spec, "--tokenizer", GPT2, "-C", "1024", "--dry-run", "-q",
                            "--cache-dir", str(t / "v")])
    assert r.exit_code == 0, r.output
    return r.stderr


# every entry on a folder; the glob route (the same reader, resolve_inputs) once per tree; each
# with the tree in the folder and reached through a link in it (S46A-9: a link was read as data)
CASES = [(e, t, False, k) for k in (False, True) for e in ENTRIES for t in TREES] + [
    ("resolve_inputs", t, True, k) for k in (False, True) for t in TREES]


@pytest.mark.parametrize("entry, tree, glob, linked", CASES, ids=[
    f"{e}-{t}-{'glob' if g else 'folder'}{'-linked' if k else ''}" for e, t, g, k in CASES])
def test_packtools_own_trees_in_a_data_folder_are_passed_over_with_a_note(tmp_path, made, entry, tree, glob, linked):
    folder, dest = _data(tmp_path, made, tree, linked)
    spec = os.path.join(folder, "**", "*.*") if glob else folder
    start = notes.mark()
    said = ENTRIES[entry](spec, made[0]) or ""
    heard = [n for n in notes.since(start) if "packtool's own folders" in n]
    assert len(heard) == 1, notes.since(start)  # once, though verify --source resolves twice
    rel = os.path.relpath(dest, folder)
    assert os.path.join(folder, rel) in heard[0] and heard[0].startswith(f"{spec}: passed over "), heard[0]
    assert ("reached through a link" in heard[0]) == linked, heard[0]
    if entry.startswith("cli"):
        assert "passed over" in said


@pytest.mark.parametrize("tree", ["cache entry", "packed output"])
def test_a_tree_named_itself_is_read_as_asked(tmp_path, made, tree):
    _, dest = _data(tmp_path, made, tree)
    start = notes.mark()
    files = resolve_inputs([dest])
    assert files and not notes.since(start)


def test_a_folder_of_nothing_but_packtools_trees_says_so(tmp_path, made):
    folder, dest = _data(tmp_path, made, "packed output")
    os.remove(os.path.join(folder, "s.jsonl"))
    for spec in (folder, os.path.join(folder, "*", "*.parquet")):
        with pytest.raises(packtool.PacktoolError) as e:
            resolve_inputs([spec])
        assert "outside packtool's own folders" in str(e.value) and dest in str(e.value), str(e.value)


@pytest.mark.parametrize("glob", [False, True], ids=["prefix", "glob"])
@pytest.mark.parametrize("tree", TREES)
def test_on_a_store_prefix_too(tmp_path, made, tree, glob):
    """The object-store route (a file:// URI: storage.expand's listing, hidden names included)."""
    if tree == "train checkpoint":
        pytest.skip("a checkpoint is known by its contents: a store listing cannot tell it (left alone)")
    folder, dest = _data(tmp_path, made, tree)
    spec = f"file://{folder}" + ("/**/*.*" if glob else "")
    start = notes.mark()
    assert [os.path.basename(f.path) for f in resolve_inputs([spec])] == ["s.jsonl"]
    heard = [n for n in notes.since(start) if "packtool's own folders" in n]
    assert len(heard) == 1 and dest in heard[0], notes.since(start)


# S48A-16: a folder was passed over as packtool's own on a file name alone: any `.manifest.json`
# (another tool's export or checksum manifest, empty, not JSON) made it "a packed output", any
# cache.json beside data/ (a downloader's) "a tokenized cache entry", and its rows were left out.
# A folder is packtool's only on proof: a manifest naming packtool's format (or shards beside it),
# a cache.json packtool sealed (or the entry's parts beside it); the older plain `manifest.json`, a
# name datasets use, the same.
USERS = {  # the user's folder's own file, beside its data (data/ for the cache.json case)
    "manifest.json naming another format": ("manifest.json", '{"format": "my-dataset", "files": ["s.jsonl"]}', ""),
    ".manifest.json of another tool": (".manifest.json", '{"version": 3, "files": ["s.jsonl"]}', ""),
    ".manifest.json empty": (".manifest.json", "", ""),
    ".manifest.json not JSON": (".manifest.json", "not json", ""),
    "cache.json of a downloader": ("cache.json", '{"etag": "x"}', "data"),
}


@pytest.mark.parametrize("store", [False, True], ids=["folder", "store prefix"])
@pytest.mark.parametrize("own", list(USERS))
def test_a_users_folder_is_not_taken_for_packtools_on_a_file_name(tmp_path, made, own, store):
    t, _ = made
    name, text, data = USERS[own]
    d = tmp_path / "data" / "shard1"
    (d / data).mkdir(parents=True)
    shutil.copy(t / "good" / "s.jsonl", d / data / "s.jsonl")
    (d / name).write_text(text)
    spec = f"file://{tmp_path}/data" if store else str(tmp_path / "data")
    start = notes.mark()
    files = [os.path.basename(f.path) for f in resolve_inputs([spec]) if not f.path.endswith(name)]
    assert files == ["s.jsonl"], files
    assert not [n for n in notes.since(start) if "packtool's own" in n], notes.since(start)


@pytest.mark.parametrize("spec, expect", [
    ("*.jsonl", ["a.jsonl", "b.jsonl"]), ("./*.jsonl", ["./a.jsonl", "./b.jsonl"]),
    ("sub/*.jsonl", ["sub/c.jsonl"]), ("**/*.jsonl", ["a.jsonl", "b.jsonl", "sub/c.jsonl"]),
    (".", ["./a.jsonl", "./b.jsonl", "./sub/c.jsonl"]), ("sub", ["sub/c.jsonl"]),
])
def test_relative_specs_from_the_working_folder_are_read(tmp_path, monkeypatch, spec, expect):
    """A glob or folder given relative to the working folder (`pack '*.jsonl'`, the README's form):
    bdcf74d's per-level judging asked os.path.relpath('') of a match with no folder part and every
    such pack ended in "error: no path specified"."""
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    for name in ("a.jsonl", "b.jsonl", "sub/c.jsonl"):
        (data / name).write_text('{"input_ids": [1, 2, 3]}\n')
    monkeypatch.chdir(data)
    got = sorted(os.path.relpath(f.path, data) for f in resolve_inputs([spec]))
    assert got == sorted(os.path.normpath(p) for p in expect)
    r = runner.invoke(app, ["pack", spec, "-C", "64", "-q", "-o", "../out", "--cache-dir", "../cache"])
    assert r.exit_code == 0 and os.path.exists(tmp_path / "out" / ".manifest.json"), r.output
