"""Nothing packtool writes for the user lands inside one of packtool's own trees, at any depth
(output.relations.packed_problem, S33-1): a tokenized cache entry (deleted whole when found
damaged: a plan, report or checkpoint there went with it, unnamed), a temporary or staging
folder (removed when its run ends), a train --save checkpoint folder (checkpoint files only).
The packed output, the fourth tree, is tests/packing/test_write_paths.py's. And a damaged
entry holding anything packtool did not write is named and left, never deleted."""
from __future__ import annotations

import contextlib
import json
import os
import shutil

import numpy as np
import pytest
from leftover_support import snapshot
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.errors import PacktoolOutputError
from packtool.output.relations import WHY
from writer_support import WRITERS, write_into

runner = CliRunner()
PACK = ["pack", "toks.jsonl", "-C", "64", "--no-progress", "-q"]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """One real tokenized cache entry (another cache root than the writers' `cache`) and a
    packed output for inspect, copied into each test's folder."""
    base = tmp_path_factory.mktemp("made")
    with open(base / "toks.jsonl", "w") as f:
        for i in range(20):
            f.write(json.dumps({"input_ids": list(range(1, 8 + i % 5))}) + "\n")
    np.save(base / "lengths.npy", np.arange(1, 60, dtype=np.int64))
    old = os.getcwd()
    os.chdir(base)
    try:
        r = runner.invoke(app, [*PACK, "--cache-dir", "other", "-o", "packed"])
    finally:
        os.chdir(old)
    assert r.exit_code == 0, r.stdout + r.stderr
    return base


@pytest.fixture
def proj(made, tmp_path, monkeypatch):
    for n in ("toks.jsonl", "lengths.npy"):
        shutil.copy(made / n, tmp_path / n)
    for n in ("other", "packed"):
        shutil.copytree(made / n, tmp_path / n)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _own_tree(proj, kind: str) -> str:
    """A folder of `kind`, as packtool leaves it, relative to proj."""
    if kind == "cache":
        (entry,) = os.listdir(proj / "other")
        return f"other/{entry}"
    if kind == "temporary":
        from packtool.output.leftovers import mark
        os.mkdir(proj / ".packed.packtool-tmp-1-abcdefgh")
        mark(str(proj / ".packed.packtool-tmp-1-abcdefgh"))
        return ".packed.packtool-tmp-1-abcdefgh"
    _checkpoint_folder(proj, "packtool's checkpoint")
    return "ckpt"


def _checkpoint_folder(proj, whose: str) -> None:
    """`ckpt` holding an `mp_rank_00.pt` of `whose` (a key of RANK_FILES)."""
    torch = pytest.importorskip("torch")
    from packtool.checkpoint_kind import KEYS
    os.mkdir(proj / "ckpt")
    rank0 = proj / "ckpt" / "mp_rank_00.pt"
    if whose == "a user's text file":
        rank0.write_bytes(b"weights")
    elif whose == "another trainer's torch file":
        torch.save({"state_dict": {"w": torch.zeros(2)}}, rank0)
    elif whose == "a link to packtool's checkpoint":
        torch.save(dict.fromkeys(KEYS, 0), proj / "real.pt")
        os.symlink(proj / "real.pt", rank0)
    else:
        torch.save(dict.fromkeys(KEYS, 0), rank0)  # save_checkpoint's record


@pytest.mark.parametrize("depth", ["", "data", "x/y"])
@pytest.mark.parametrize("kind", ["cache", "temporary", "checkpoint"])
@pytest.mark.parametrize("what", WRITERS)
def test_nothing_packtool_writes_lands_inside_its_own_trees(proj, what, kind, depth):
    rel = _own_tree(proj, kind)
    if depth:
        os.makedirs(proj / rel / depth, exist_ok=True)
    before = snapshot(proj / rel, skip=())
    out = os.path.join(rel, depth) if depth else rel
    name = WHY[kind][0]
    if what.startswith(("train", "library")):
        if what.startswith("train"):
            pytest.importorskip("torch")
        with pytest.raises(PacktoolOutputError, match=f"inside {name}"):
            write_into(what, out)
    else:
        r = write_into(what, out)
        errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
        assert r.exit_code == 2 and len(errors) == 1 and f"inside {name}" in errors[0], r.stdout + r.stderr
    assert snapshot(proj / rel, skip=()) == before


RANK_FILES = {"a user's text file": None, "another trainer's torch file": None,
              "a link to packtool's checkpoint": None, "packtool's checkpoint": "checkpoint"}


@pytest.mark.parametrize("what", ["plan -o", "library write_plan"])
@pytest.mark.parametrize("whose", RANK_FILES)
def test_a_checkpoint_folder_is_known_by_its_contents_not_a_files_name(proj, whose, what):
    """A user's own `mp_rank_00.pt` does not make its folder packtool's (checkpoint_kind, the
    rule train --save replaces by); a checkpoint save_checkpoint wrote does."""
    from packtool.output.relations import own_tree_kind
    _checkpoint_folder(proj, whose)
    assert own_tree_kind(str(proj / "ckpt")) == RANK_FILES[whose]
    refused, needle = RANK_FILES[whose] is not None, f"inside {WHY['checkpoint'][0]}"
    before = snapshot(proj / "ckpt", skip=())
    if what.startswith("library"):
        with pytest.raises(PacktoolOutputError, match=needle) if refused else contextlib.nullcontext():
            write_into(what, "ckpt")
    else:
        r = write_into(what, "ckpt")
        assert (r.exit_code, needle in r.stderr) == ((2, True) if refused else (0, False)), r.stdout + r.stderr
    assert refused == (snapshot(proj / "ckpt", skip=()) == before)  # written beside a user's file, never into packtool's


def test_save_writes_into_its_own_checkpoint_folder(proj):
    torch = pytest.importorskip("torch")
    from packtool.megatron.checkpoint import KEYS
    from packtool.megatron.loop import check_save
    rel = _own_tree(proj, "checkpoint")
    torch.save(dict.fromkeys(KEYS, 0), proj / rel / "mp_rank_00.pt")  # replaced only if it is a checkpoint (S35-5)
    assert check_save(rel, rel, False) == str(proj / rel)  # a resumed run: --load is --save


def _fresh_entry(proj) -> str:
    """This folder's own entry (the key holds the input's path: a copied one is not reused)."""
    shutil.rmtree(proj / "other")
    r = runner.invoke(app, [*PACK, "--cache-dir", "other", "--dry-run"])
    assert r.exit_code == 0, r.stdout + r.stderr
    (entry,) = os.listdir(proj / "other")
    return entry


@pytest.mark.parametrize("planted", ["data/plan.parquet", "report.html", "ckpt/mp_rank_00.pt", "flat/notes.txt",
                                     "link"])
def test_a_damaged_entry_holding_a_users_file_is_named_and_left(proj, planted):
    entry = _fresh_entry(proj)
    e = proj / "other" / entry
    if planted == "link":
        os.symlink(proj / "toks.jsonl", e / "link")
    else:
        os.makedirs(os.path.dirname(e / planted), exist_ok=True)
        (e / planted).write_bytes(b"a user's file")
    with open(e / "flat" / "tokens.i32", "r+b") as f:  # any damage: a changed byte
        f.seek(8)
        f.write(b"X")
    before = snapshot(proj / "other", skip=())
    r = runner.invoke(app, [*PACK, "--cache-dir", "other", "--dry-run"])
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.exit_code == 2 and len(errors) == 1, r.stdout + r.stderr
    named = "ckpt" if planted.startswith("ckpt/") else planted  # a folder of its own: named as one
    assert "is damaged" in errors[0] and f"({named})" in errors[0] and "move them out" in errors[0], errors[0]
    assert snapshot(proj / "other", skip=()) == before  # nothing deleted, the user's file least of all


def test_a_damaged_entry_of_packtools_files_only_is_rebuilt(proj):
    entry = _fresh_entry(proj)
    with open(proj / "other" / entry / "flat" / "tokens.i32", "r+b") as f:
        f.seek(8)
        f.write(b"X")
    r = runner.invoke(app, [*PACK, "--cache-dir", "other", "--dry-run"])
    assert r.exit_code == 0 and "is damaged" in r.stderr, r.stdout + r.stderr
    assert os.listdir(proj / "other") == [entry]


@pytest.mark.parametrize("depth", ["", "data", "x/y"])
def test_a_store_output_inside_a_cache_entry_is_refused(proj, depth):
    """The same on an object store (a file:// URI takes the store's route): a prefix holding
    cache.json beside data/ or flat/ objects is an entry (output.store)."""
    rel = _own_tree(proj, "cache")
    before = snapshot(proj / rel, skip=())
    out = f"file://{proj}/{os.path.join(rel, depth, 'sub')}"
    r = runner.invoke(app, [*PACK, "--cache-dir", "cache", "-o", out])
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.exit_code == 2 and len(errors) == 1 and "inside a tokenized cache entry" in errors[0], r.stdout + r.stderr
    assert snapshot(proj / rel, skip=()) == before


@pytest.mark.parametrize("depth", ["", "data", "x/y"])
@pytest.mark.parametrize("kind", ["cache", "temporary", "checkpoint"])
def test_a_cache_root_inside_packtools_own_trees_is_refused(proj, kind, depth):
    """The tokenized cache root is written into too (tokenize.cache_root.check_cache_dir asks
    the same rule): one inside an entry would be deleted with it."""
    rel = _own_tree(proj, kind)
    before = snapshot(proj / rel, skip=())
    r = runner.invoke(app, [*PACK, "--cache-dir", os.path.join(rel, depth, "c"), "--dry-run"])
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.exit_code == 2 and len(errors) == 1 and f"inside {WHY[kind][0]}" in errors[0], r.stdout + r.stderr
    assert snapshot(proj / rel, skip=()) == before


def test_a_flat_store_rebuilt_whole_keeps_a_users_file(proj):
    """flat/ is rebuilt whole where cache.json records no checksums for it (a Ray-built entry):
    a file packtool did not write there is named and left (tokenize.flat_tokens)."""
    from packtool.errors import PacktoolError
    from packtool.tokenize.flat_tokens import build_flat_tokens
    e = proj / "other" / _fresh_entry(proj)
    (e / "flat" / "notes.txt").write_bytes(b"a user's file")
    os.unlink(e / "flat" / "tokens.i32")  # incomplete: rebuilt
    before = snapshot(proj / "other", skip=())
    parts = sorted(str(p) for p in (e / "data").iterdir())
    with pytest.raises(PacktoolError, match=r"holds files packtool did not write there \(notes.txt\)"):
        build_flat_tokens(parts, str(e / "flat"))
    assert snapshot(proj / "other", skip=()) == before


def _damage(entry_dir):
    with open(os.path.join(entry_dir, "flat", "tokens.i32"), "r+b") as f:  # any damage: a changed byte
        f.seek(8)
        f.write(b"X")


@pytest.mark.parametrize("kind", ["link to a damaged entry", "link to a file", "dangling link", "file"])
def test_an_entry_packtool_did_not_make_is_named_and_left(proj, kind):
    """S44-10: an entry under the key's name that is not a folder packtool made (the user's link
    to a shared entry, a file) and does not check out is named and left, never renamed into
    packtool's own set-aside pattern (which a later run would then disown as a lookalike)."""
    entry = _fresh_entry(proj)
    e, shared = proj / "other" / entry, proj / "shared"
    shutil.move(str(e), str(shared))
    if kind == "link to a damaged entry":
        _damage(shared)
        os.symlink(os.path.join("..", "shared"), e)
    elif kind == "link to a file":
        os.symlink(proj / "toks.jsonl", e)
    elif kind == "dangling link":
        os.symlink(proj / "gone", e)
    else:
        e.write_bytes(b"a user's file")
    before = (snapshot(proj / "other", skip=()), snapshot(shared, skip=()))
    r = runner.invoke(app, [*PACK, "--cache-dir", "other", "--dry-run"])
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.exit_code == 2 and len(errors) == 1, r.stdout + r.stderr
    assert str(e) in errors[0] and "left it" in errors[0] and "Traceback" not in r.stderr, errors[0]
    assert (snapshot(proj / "other", skip=()), snapshot(shared, skip=())) == before
    r = runner.invoke(app, [*PACK, "--cache-dir", "other", "--dry-run"])  # said again, nothing disowned
    assert r.exit_code == 2 and "looks like a packtool temporary" not in r.stderr, r.stderr
