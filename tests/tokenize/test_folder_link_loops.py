"""S47A-1: a folder input (or a user's `**` glob) holding a link back to itself or to a folder
above it (`latest -> .`, `current -> .`, `up -> ..`) was walked link by link to the kernel's
40-link limit: with two such links 2^40 paths were listed before anything was checked (a
`pack DIR` that never ended), with one the run was refused "input given more than once" naming
a path 40 folders deep. The walk (storage.local_walk, the one owner of a local glob's `**`)
goes into each real folder once: a link to a folder already walked, or to one holding the
link, is not followed, and one note names it; the tree's files are read once, by their own
names, at every door that reads a folder input. The listings are counted, not timed: a walk
that lists more folders than the tree holds fails the test at once instead of hanging it."""
from __future__ import annotations

import glob
import json
import os

import pytest
from conftest import GPT2, GSM8K
from typer.testing import CliRunner

import packtool
from packtool import notes
from packtool.cli.app import app
from packtool.output.relations import input_paths
from packtool.storage import local_glob
from packtool.tokenize import TokenizeConfig, tokenize_to_cache
from packtool.tokenize.readers import resolve_inputs

runner = CliRunner()

# tree -> the links made in the data folder `d` (name -> target, relative as `ln -s` takes it)
LINKS = {
    "one link to itself": {"latest": "."},
    "two links to itself": {"latest": ".", "current": "."},
    "three links to itself": {"a": ".", "b": ".", "c": "."},
    "a link to the folder above": {"up": ".."},
    "a subfolder's links to the root and above": {"sub/root": "..", "sub/top": "../.."},
    "a link beside the folder it names": {"current": "sub"},
    "two links to one folder outside": {"x1": "../outside", "x2": "../outside"},
}
SPECS = {  # how the folder is given
    "folder": lambda d: d,
    "glob **/*.jsonl": lambda d: os.path.join(d, "**", "*.jsonl"),
    "glob [d]/**/*.jsonl": lambda d: os.path.join(os.path.dirname(d), "[d]", "**", "*.jsonl"),
}


@pytest.fixture
def listings(monkeypatch):
    """Counts folder listings; past a bound far above the tree's few folders it stops the walk
    (glob and the walk both list through os.scandir)."""
    count = [0]
    real = os.scandir

    def counted(*a, **k):
        count[0] += 1
        if count[0] > 500:
            raise AssertionError("the walk listed more than 500 folders of a tree of 4: it follows a loop")
        return real(*a, **k)

    monkeypatch.setattr(os, "scandir", counted)
    return count


def _tree(tmp_path, links) -> tuple[str, list[str]]:
    """(the data folder, its real data files). `outside` (a sibling of the folder) holds one."""
    d = tmp_path / "d"
    (d / "sub").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    with open(GSM8K) as f:
        lines = f.readlines()
    (d / "a.jsonl").write_text("".join(lines[:4]))
    (d / "sub" / "b.jsonl").write_text("".join(lines[4:7]))
    (tmp_path / "outside" / "c.jsonl").write_text("".join(lines[7:10]))
    for name, target in links.items():
        os.symlink(target, d / name)
    files = [str(d / "a.jsonl"), str(d / "sub" / "b.jsonl")]
    if any("outside" in t for t in links.values()):
        files.append(str(d / "x1" / "c.jsonl"))
    return str(d), sorted(files)


def _passed(links) -> list[str]:
    """The links a walk does not follow: all of them, but the first link to a folder outside."""
    return [n for n in links if n != "x1"]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("tree", LINKS)
def test_each_real_folder_is_walked_once(tree, spec, tmp_path, listings):
    d, files = _tree(tmp_path, LINKS[tree])
    start = notes.mark()
    got = resolve_inputs([SPECS[spec](d)])
    assert sorted(f.path for f in got) == files
    said = [n for n in notes.since(start) if "did not follow" in n]
    assert len(said) == 1, notes.since(start)
    for name in _passed(LINKS[tree]):
        assert os.path.join(d, name) + " -> " in said[0], said[0]


def _verify_source(folder, t):
    r = runner.invoke(app, ["pack", folder, "--tokenizer", GPT2, "-C", "1024", "-q", "-o", str(t / "out"),
                            "--cache-dir", str(t / "c")])
    assert r.exit_code == 0, r.output
    return runner.invoke(app, ["verify", str(t / "out"), "--source", folder, "-q", "--cache-dir", str(t / "c")])


ENTRIES = {  # every door that reads a folder input -> the rows it read
    "tokenize_to_cache": lambda d, t: tokenize_to_cache([d], TokenizeConfig(tokenizer=GPT2), str(t / "c"),
                                                        progress=False).num_rows,
    "library pack": lambda d, t: packtool.pack([d], tokenize=TokenizeConfig(tokenizer=GPT2), dry_run=True,
                                               cache_dir=str(t / "c")).summary.sequences,
    "cli pack": lambda d, t: json.loads(runner.invoke(app, [
        "--json", "pack", d, "--tokenizer", GPT2, "-C", "1024", "--dry-run", "-q",
        "--cache-dir", str(t / "c")]).stdout)["sequences"],
    "cli verify --source": lambda d, t: 7 if _verify_source(d, t).exit_code == 0 else None,
}


@pytest.mark.parametrize("entry", ENTRIES)
def test_every_door_reads_a_looped_folder_once(entry, tmp_path, listings):
    d, _ = _tree(tmp_path, LINKS["two links to itself"])
    assert ENTRIES[entry](d, tmp_path) == 7  # a.jsonl's 4 rows and sub/b.jsonl's 3, once


def test_an_output_check_over_a_looped_glob_is_bounded(tmp_path, listings):
    d, files = _tree(tmp_path, LINKS["two links to itself"])
    assert sorted(input_paths([os.path.join(d, "**", "*.jsonl")])) == files


PATTERNS = ["t/**/*", "t/**", "t/**/", "t/**/*.jsonl", "t/*/**/*.jsonl", "t/**/.h/**", "t/**/.*", "**/*.jsonl",
            "**", "*/**/sub", "t/a/**/c/*", "t/**/**/*.jsonl", "t/*", "t/**/c", "t/a/*", "t/[ab]/**/*.jsonl"]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_without_loops_the_matches_are_globs(pattern, tmp_path, monkeypatch):
    """The walk changes nothing else: glob's rules (hidden names, `**` as zero or more folders,
    a trailing `/`, a link to a folder outside the tree followed, a link to nothing listed)."""
    (tmp_path / "w").mkdir()
    monkeypatch.chdir(tmp_path / "w")
    for folder in ("t/a/sub/c", "t/.h/x", "t/d", "../out/o"):
        os.makedirs(folder)
    for f in ("t/a/1.jsonl", "t/a/sub/2.jsonl", "t/a/sub/c/3.jsonl", "t/.h/x/4.jsonl", "t/d/.5.jsonl",
              "t/6.jsonl", "t/.7", "../out/o/9.jsonl"):
        open(f, "w").close()
    os.symlink("nowhere", "t/dangling.jsonl")
    os.symlink("../../out", "t/lo")  # outside the working folder: followed, as glob does
    passed: list = []
    assert sorted(local_glob(pattern, passed)) == sorted(glob.glob(pattern, recursive=True))
    assert passed == []
