"""Stranger 31 S31-3/4/5: the tokenized cache root is a path packtool writes, so it is checked
as --output is (tokenize.cache_root.check_cache_dir), before any work, wherever it comes from: a
library `cache_dir=`, `--cache-dir`, PACKTOOL_CACHE_DIR, for pack (both engines), verify
--source and the library's tokenize_to_cache (and the Ray engine's tokenize step) on their own. A packed output (or a folder in one), a folder inside an input folder (or the folder
itself), a folder holding an input (S32-11: `--cache-dir data` for data/x.jsonl put the cache
among the data, and the next `pack data` read it as input), a file, a folder under a file, a FIFO, a device and a link to nothing are refused in
one line naming the argument (library), the flag or the variable (CLI), the fix; nothing is
written and the user's files stay byte for byte as they were."""
from __future__ import annotations

import json
import os

import pytest
from conftest import GPT2, gsm8k_packed
from leftover_support import snapshot
from typer.testing import CliRunner

import packtool
from packtool.cli.app import app
from packtool.errors import PacktoolCacheError
from packtool.tokenize import TokenizeConfig

runner = CliRunner()


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    """An input folder, a packed output of it, and the bad targets beside them."""
    d = tmp_path_factory.mktemp("cachedir")
    gsm8k_packed(d, 20, "ind", "-o", str(d / "packed"), "--cache-dir", str(d / "good-cache"))
    (d / "notes.txt").write_text("mine\n")
    os.mkfifo(d / "fifo")
    os.symlink(d / "nowhere", d / "dangling")
    os.symlink(d / "packed", d / "link-to-packed")
    return d


INPUT = {"holding the input file (S32-11)": "ind/s.jsonl"}  # target -> the input read (else the folder)
_READ = {"input": "ind"}


def _src(d) -> str:
    return str(d / _READ["input"])


TARGETS = {  # name -> path relative to the place (absolute: as is)
    "packed output": "packed", "inside a packed output": "packed/sub/cache",
    "link to a packed output": "link-to-packed", "input folder": "ind", "inside the input folder": "ind/cache",
    "an input file": "ind/s.jsonl", "holding the input folder": ".", "holding the input file (S32-11)": "ind",
    "a file": "notes.txt", "under a file": "notes.txt/cache",
    "a FIFO": "fifo", "a device": "/dev/null", "a link to nothing": "dangling",
}


def _lib_pack(d, cache_dir):
    packtool.pack([_src(d)], tokenize=TokenizeConfig(tokenizer=GPT2), dry_run=True, cache_dir=cache_dir)


def _lib_pack_ray(d, cache_dir):
    from packtool.engines import pack_ray
    pack_ray([_src(d)], tokenize=TokenizeConfig(tokenizer=GPT2), dry_run=True, cache_dir=cache_dir)


def _lib_tokenize(d, cache_dir):
    from packtool.tokenize import tokenize_to_cache
    tokenize_to_cache([_src(d)], TokenizeConfig(tokenizer=GPT2), cache_dir=cache_dir, progress=False)


def _lib_tokenize_ray(d, cache_dir):  # the Ray engine's tokenize step, as pack_ray calls it
    from packtool.engines.ray_engine import tokenized_cache
    tokenized_cache([_src(d)], TokenizeConfig(tokenizer=GPT2), cache_dir)


def _cli_pack(d, flags):
    return ["pack", _src(d), "--tokenizer", GPT2, "-C", "1024", "--dry-run", "-q", *flags]


def _cli_pack_ray(d, flags):
    return [*_cli_pack(d, flags), "--engine", "ray"]


def _cli_verify(d, flags):
    return ["verify", str(d / "packed"), "--source", _src(d), "-q", *flags]


LIBRARY = {"pack": _lib_pack, "pack_ray": _lib_pack_ray, "tokenize_to_cache": _lib_tokenize,
           "ray tokenized_cache": _lib_tokenize_ray}
CLI = {"pack": _cli_pack, "pack --engine ray": _cli_pack_ray, "verify --source": _cli_verify}
ENTRIES = [(kind, entry, how) for kind, table in (("library", LIBRARY), ("cli", CLI)) for entry in table
           for how in ("argument", "PACKTOOL_CACHE_DIR")]
# a store cache_dir's local mirror is made under PACKTOOL_CACHE_DIR (tokenize.store_cache): checked
# as that root, before the mirror is made; verify --source takes no store cache.
ENTRIES += [(kind, entry, "a store URI + PACKTOOL_CACHE_DIR") for kind, entry in
            (("library", "pack"), ("library", "pack_ray"), ("library", "tokenize_to_cache"), ("cli", "pack"),
             ("cli", "pack --engine ray"))]
STORE = "s3://packtool-test-bucket/cache"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kind, entry, how", ENTRIES)
def test_every_cache_dir_entry_refuses_every_bad_target(place, target, kind, entry, how, monkeypatch):
    path = os.path.join(place, TARGETS[target])
    monkeypatch.setitem(_READ, "input", INPUT.get(target, "ind"))
    given = {"argument": path, "PACKTOOL_CACHE_DIR": None}.get(how, STORE)
    if how != "argument":
        monkeypatch.setenv("PACKTOOL_CACHE_DIR", path)
    before = snapshot(place, skip=())
    if kind == "library":
        with pytest.raises(PacktoolCacheError) as e:
            LIBRARY[entry](place, given)
        message = str(e.value)
        assert "--cache-dir" not in message
        named = "cache_dir" if how == "argument" else "PACKTOOL_CACHE_DIR"
    else:
        r = runner.invoke(app, CLI[entry](place, ["--cache-dir", given] if given else []))
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), r.output
        message = lines[0]
        named = "--cache-dir" if how == "argument" else "PACKTOOL_CACHE_DIR"
    assert named in message and "Traceback" not in message and ".tmp-" not in message, message
    assert ("give another" in message or "set PACKTOOL_CACHE_DIR to another folder" in message), message
    assert snapshot(place, skip=()) == before


def test_a_good_cache_dir_is_still_taken_and_resolved(place, tmp_path, monkeypatch):
    """The check refuses only what it names: a new folder (given with `~`) is made and used."""
    monkeypatch.setenv("HOME", str(tmp_path))
    res = packtool.pack([str(place / "ind")], tokenize=TokenizeConfig(tokenizer=GPT2), dry_run=True,
                        cache_dir="~/new/cache")
    assert res.cache_path.startswith(str(tmp_path / "new" / "cache") + os.sep)


# S32-10: the default root under a HOME that is no home. expanduser turned HOME='' into '/' (a
# cache at the file system's root, even for --dry-run) and took a missing HOME as a tree to make
# from / down; HOME=/proc failed later naming neither HOME nor the flag.
HOMES = {"empty": "", "relative": "rel", "missing": "nohome/h", "a file": "notes.txt", "/proc": "/proc"}


@pytest.mark.parametrize("home", HOMES)
@pytest.mark.parametrize("kind, entry", [("library", e) for e in LIBRARY] + [("cli", e) for e in CLI])
def test_every_entry_refuses_a_default_root_under_a_home_that_is_no_home(place, home, kind, entry, tmp_path,
                                                                        monkeypatch):
    monkeypatch.delenv("PACKTOOL_CACHE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    given = HOMES[home]
    monkeypatch.setenv("HOME", given if given in ("", "rel", "/proc") else str(place / given))
    at_root = os.path.exists("/.cache/packtool")
    before = snapshot(place, skip=())
    if kind == "library":
        with pytest.raises(PacktoolCacheError) as e:
            LIBRARY[entry](place, None)
        message, flag = str(e.value), "cache_dir"
    else:
        r = runner.invoke(app, CLI[entry](place, []))
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), r.output
        message, flag = lines[0], "--cache-dir"
    assert "HOME" in message and "PACKTOOL_CACHE_DIR" in message and flag in message, message
    assert snapshot(place, skip=()) == before and os.listdir(tmp_path) == []
    assert os.path.exists("/.cache/packtool") == at_root


@pytest.mark.parametrize("how", ["argument", "PACKTOOL_CACHE_DIR"])
@pytest.mark.parametrize("target", TARGETS)
def test_a_refused_cache_root_is_the_caches_error_in_json(place, target, how, monkeypatch):
    """S46A-10: the README's exit table gives a refused place the kind of the argument that named
    it; a cache root's was `output` (a wrapper routing on `kind` moved the output, not the cache)."""
    path = TARGETS[target] if os.path.isabs(TARGETS[target]) else str(place / TARGETS[target])
    monkeypatch.setitem(_READ, "input", INPUT.get(target, "ind"))
    if how != "argument":
        monkeypatch.setenv("PACKTOOL_CACHE_DIR", path)
    r = runner.invoke(app, _cli_pack(place, ["--json", *(["--cache-dir", path] if how == "argument" else [])]))
    e = json.loads(r.stdout)["error"]
    named = "--cache-dir" if how == "argument" else "PACKTOOL_CACHE_DIR"
    assert r.exit_code == 2 and (e["kind"], e["type"]) == ("cache", "PacktoolCacheError"), e
    assert named in e["message"] or e["flag"] == named, e
