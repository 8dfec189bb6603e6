"""Issue 23: every file packtool writes goes through one owner, and packtool never deletes what
it did not write.

1. slabs.names alone builds and recognizes every name packtool writes into an output (plain and
   run-named shards, both manifest names) or a run's temporary folder (a shard mid-write, the
   manifest's temporary): `--overwrite` owns each in a local folder (also a local copy of an
   object-store output, whose shards are run-named), and a dead run's folder holding any of
   them is swept; the store's run names are names.py's.
2. Every sweep that can remove a single file or a set-aside output (write_file's temporary, a
   killed swap's `.old`, an object-store intent) removes it only on packtool's proof
   (output.leftovers), never a user's look-alike, which stays byte-identical and is named."""
from __future__ import annotations

import json
import os

import pytest
from leftover_support import USER, dead_pid as _dead_pid, own_file, own_folder, packed_output, tree, use_system_temp

from packtool import notes
from packtool.output import folder as folder_mod
from packtool.output.files import temp_name, write_file
from packtool.output.folder import check_output, clean_stale, swap_into_place, temp_dir
from packtool.output.leftovers import MARKER, XATTR
from packtool.output.store import StoreCommit, claim_store, clean_dead_runs
from packtool.slabs.names import (
    LEGACY_MANIFEST,
    MANIFEST,
    intent_file,
    is_shard_name,
    parse_intent,
    partial_shard_file,
    run_shard_file,
    shard_file,
)
from packtool.storage import locate
from packtool.tokenize.checksum import file_digest

RUN = "0123456789ab"
# every name packtool writes into an output folder, or that a local copy of a store output holds
OUTPUT_FILES = {"shard": shard_file(0), "shard-100000": shard_file(100000),
                "run-shard (store mirror)": run_shard_file(shard_file(1), RUN),
                "manifest": MANIFEST, "older manifest": LEGACY_MANIFEST}
# and what a run's temporary folder holds while it writes them
IN_FLIGHT = {"shard mid-write": partial_shard_file(shard_file(2)),
             "manifest temporary": os.path.basename(temp_name(MANIFEST))}


@pytest.fixture(scope="module")
def dead_pid() -> int:
    return _dead_pid()


@pytest.fixture
def sys_tmp(tmp_path, monkeypatch):
    use_system_temp(monkeypatch, tmp_path / "systmp")
    return tmp_path / "systmp"


# --- 1. one owner of the names ---------------------------------------------------------------

@pytest.mark.parametrize("name", OUTPUT_FILES)
def test_overwrite_owns_every_name_packtool_writes_into_an_output(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    n = OUTPUT_FILES[name]
    out = packed_output(tmp_path / "out", *(([n],) if is_shard_name(n) else ([shard_file(0)], n)))
    assert n in check_output(out, overwrite=True)
    new = packed_output(temp_dir(out), [shard_file(0)])
    swap_into_place(new, out)
    assert sorted(os.listdir(out)) == [MANIFEST, shard_file(0)]
    assert sorted(os.listdir(tmp_path)) == ["out"]  # the old one gone whole, nothing set aside


@pytest.mark.parametrize("where", ["beside the output", "system temp"])
@pytest.mark.parametrize("name", {**OUTPUT_FILES, **IN_FLIGHT})
def test_a_dead_runs_folder_holding_any_name_packtool_writes_is_swept(tmp_path, sys_tmp, dead_pid, where, name):
    d = (tmp_path / f".o.packtool-tmp-{dead_pid}-x1" if where == "beside the output"
         else sys_tmp / f"packtool-tmp-{dead_pid}-x1")
    d.mkdir()
    (d / {**OUTPUT_FILES, **IN_FLIGHT}[name]).write_bytes(b"packtool's")
    own_folder(d, dead_pid)
    assert clean_stale(str(tmp_path / "o")) == 1 and not d.exists()


def test_an_object_store_run_names_its_shards_and_intent_through_names(tmp_path, sys_tmp):
    uri = "file://" + packed_output(tmp_path / "store")
    with claim_store(uri, overwrite=True):
        commit = StoreCommit(uri)
        dests = commit.begin([shard_file(0), shard_file(1)])
        names = [d.name for d in dests]
        assert names == [run_shard_file(shard_file(k), commit.run) for k in (0, 1)]
        assert all(is_shard_name(x) for x in names)
        intent = intent_file(commit.run)
        rec = parse_intent(intent, locate(uri).join(intent).read_bytes())
        assert rec["new"] == names and rec["old"] == [shard_file(0)]
        assert set(rec["proofs"]) == {shard_file(0)}  # the new shards' come with finish
        commit.abort()


# --- 2. a name is no proof -------------------------------------------------------------------

def _temp_file(tmp_path, pid, own):
    p = tmp_path / f".plan.parquet.packtool-tmp-{pid}-0badc0de"
    p.write_bytes(b"half a plan" if own else USER)
    if own:
        own_file(p, **own)
    return p


def _killed_swap(tmp_path, pid, own, monkeypatch):
    """The previous output a swap set aside and did not remove: made by swap_into_place itself
    for packtool's own (the kill stands in as a removal that never ran)."""
    out = str(tmp_path / "out")
    if not own:  # a user's backup of an output, under a name that looks like a set-aside one
        return tmp_path / f".out.packtool-tmp-{pid}-x1.old", packed_output(tmp_path / f".out.packtool-tmp-{pid}-x1.old")
    packed_output(out)
    new = packed_output(temp_dir(out), [shard_file(0), shard_file(1)])
    with monkeypatch.context() as m:
        m.setattr(folder_mod, "remove_previous", lambda *a, **k: 0)
        swap_into_place(new, out)
    old = tmp_path / (os.path.basename(new) + ".old")
    assert (old / MARKER).exists()  # marked as it was set aside
    own_folder(old, **own)
    return old, None


def _write_file_site(tmp_path, pid, own, monkeypatch):
    return _temp_file(tmp_path, pid, own), lambda: _write(tmp_path / "plan.parquet")


def _write(target):
    with write_file(target, "--output", replace=True) as f:
        f.write(b"whole")


def _old_kept_site(tmp_path, pid, own, monkeypatch):
    old, _ = _killed_swap(tmp_path, pid, own, monkeypatch)
    if not (tmp_path / "out").exists():
        packed_output(tmp_path / "out")  # a later output in place: the set-aside one is only removed
    return old, lambda: clean_stale(str(tmp_path / "out"))


def _old_restored_site(tmp_path, pid, own, monkeypatch):
    old, _ = _killed_swap(tmp_path, pid, own, monkeypatch)
    if own:
        import shutil
        shutil.rmtree(tmp_path / "out")  # killed between the two renames: nothing in its place
    return old, lambda: clean_stale(str(tmp_path / "out"))


SITES = {"write_file temporary": _write_file_site, "swap's .old, output in place": _old_kept_site,
         "swap's .old, output missing": _old_restored_site}
CASES = ("user-lookalike", "dead-own", "live-own", "other-host", "other-pid-namespace")


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("site", SITES)
def test_a_sweep_removes_a_file_or_set_aside_output_only_on_proof(tmp_path, sys_tmp, dead_pid, monkeypatch, site, case):
    pid = os.getpid() if case == "live-own" else dead_pid
    own = None if case == "user-lookalike" else dict(
        pid=pid, **{"other-host": {"host": "another-host"}, "other-pid-namespace": {"pidns": "pid:[1]"}}.get(case, {}))
    leftover, sweep = SITES[site](tmp_path, pid, own, monkeypatch)
    before, start = tree(leftover), notes.mark()
    sweep()
    said = "\n".join(notes.since(start))
    if case == "dead-own":
        assert not os.path.lexists(leftover) and ("removed" in said or "restored" in said)
        if site == "swap's .old, output missing":
            assert "restored" in said and MARKER not in os.listdir(tmp_path / "out")
        return
    assert tree(leftover) == before  # byte-identical, where it was
    if site == "swap's .old, output missing":
        assert not (tmp_path / "out").exists()  # never moved into place on a name alone
    if case == "live-own":
        assert str(leftover) not in said
    else:
        assert f"left {leftover}:" in said and "removed" not in said


@pytest.mark.parametrize("replace", [False, True])
def test_write_file_marks_its_temporary_and_publishes_without_the_mark(tmp_path, replace):
    """The temporary is born nameless with its record (nothing to see, nothing a kill leaves)."""
    target = tmp_path / "report.html"
    if replace:
        target.write_bytes(b"old")
    with write_file(target, "--html", replace=replace) as f:
        f.write(b"x")
        assert os.listdir(tmp_path) == (["report.html"] if replace else [])
        assert json.loads(os.getxattr(f.fileno(), XATTR))["pid"] == os.getpid()
    assert os.listdir(tmp_path) == ["report.html"] and XATTR not in os.listxattr(target)
    assert target.read_bytes() == b"x"


@pytest.mark.parametrize("intent", [
    {"new": ["thesis.pdf"], "old": []},  # names a user's object
    {"new": [run_shard_file(shard_file(0), "ffffffffffff")], "old": []},  # another run's names
    {"new": [shard_file(0)], "old": [], "note": "mine"},  # not the form packtool writes
    {"new": [shard_file(0)], "old": [], "proofs": {"thesis.pdf": {"bytes": 1, "xxh3_128": "0"}}},  # proves another name
    {"new": [shard_file(0)], "old": [], "proofs": {shard_file(0): {"bytes": True, "xxh3_128": "0"}}},  # not a proof
    "not json",
])
def test_an_object_that_only_looks_like_an_intent_is_never_acted_on(tmp_path, sys_tmp, intent):
    loc = locate("file://" + str(tmp_path / "store"))
    os.makedirs(loc.path)
    name = intent_file(RUN)
    loc.join(name).write_bytes(intent.encode() if isinstance(intent, str) else json.dumps(intent).encode())
    for n in ("thesis.pdf", shard_file(0), run_shard_file(shard_file(0), "ffffffffffff")):
        loc.join(n).write_bytes(USER)
    before = tree(loc.path)
    assert clean_dead_runs(loc) == 0 and tree(loc.path) == before
    half = run_shard_file(shard_file(0), RUN)
    loc.join(half).write_bytes(b"half a shard")
    own = {"new": [half], "old": [], "proofs": {half: {"bytes": 12, "xxh3_128": file_digest(loc.join(half).path, "xxh3_128")}}}
    loc.join(name).write_bytes(json.dumps(own).encode())  # a dead run's own
    assert clean_dead_runs(loc) == 1 and not loc.join(name).exists() and loc.join("thesis.pdf").exists()


def test_a_folder_packtool_writes_files_into_takes_only_its_own_files_temporaries_as_its_own(tmp_path):
    """`train --save`'s check (files.refuse_foreign_files): a temporary's name counts as
    packtool's only for a file packtool writes there, not for any name."""
    from packtool.errors import PacktoolOutputError
    from packtool.output.files import refuse_foreign_files
    ours = lambda n: n.startswith("mp_rank_")  # noqa: E731
    (tmp_path / os.path.basename(temp_name("mp_rank_00.pt"))).write_bytes(b"half")
    refuse_foreign_files(str(tmp_path), str(tmp_path), "save", ours)
    (tmp_path / ".thesis.txt.packtool-tmp-9-ab").write_bytes(USER)
    with pytest.raises(PacktoolOutputError, match=r"\.thesis\.txt\.packtool-tmp-9-ab"):
        refuse_foreign_files(str(tmp_path), str(tmp_path), "save", ours)
