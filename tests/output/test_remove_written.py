"""One rule removes what a call of packtool wrote (output.removal.remove_written), asked by both
places that remove such things: a temporary folder's contents (leftovers.remove_tree) and the
datasets-cache conversion a refused to_hf() call wrote (hf.load, S46B-8). A folder goes with
what is in it, a link goes as a link (its target stays), a path reached through a link or
inside a folder already removed stays (another writer may have put it there since)."""
from __future__ import annotations

import os
import shutil

import pytest

import packtool.output.leftovers as leftovers
import packtool.output.removal as removal
from packtool.errors import PacktoolInputError


def _foreign(tmp_path):
    """A user's folder and file, which links the call wrote point at."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "keep.txt").write_bytes(b"the user's")
    return theirs


# what a call may have written: name -> how to make it (in `d`, a user's folder `theirs` beside)
def _file(d, theirs):
    (d / "f.arrow").write_bytes(b"x")


def _tree(d, theirs):
    (d / "conv" / "1.0" / "abc").mkdir(parents=True)
    (d / "conv" / "1.0" / "abc" / "data.arrow").write_bytes(b"x")
    os.symlink(theirs, d / "conv" / "to_theirs")  # a link inside: removed as a link
    os.symlink(theirs / "keep.txt", d / "conv" / "1.0" / "to_keep")


def _link_to_folder(d, theirs):
    os.symlink(theirs, d / "conv_link")


def _link_to_file(d, theirs):
    os.symlink(theirs / "keep.txt", d / "conv.lock")


def _dangling(d, theirs):
    os.symlink(d / "nowhere", d / "conv.tmp")


WRITTEN = {"a file": _file, "a folder holding links": _tree, "a link to a folder": _link_to_folder,
           "a link to a file": _link_to_file, "a dangling link": _dangling}


def _every_path(d) -> set[str]:
    """Every path under `d`, as a glob of the call's names finds them (through links too)."""
    out = set()
    for root, dirs, files in os.walk(d, followlinks=True):
        out |= {os.path.join(root, n) for n in dirs + files}
    return out


def _by_remove_tree(d, theirs, monkeypatch):
    leftovers.mark(str(d))
    leftovers.remove_tree(str(d))


def _by_to_hf(d, theirs, monkeypatch):
    """hf.load's removal of the conversion a refused to_hf() call wrote: every path of it."""
    import packtool.hf.load as load
    import packtool.output.unchanged as unchanged

    def changed(*a, **k):
        raise PacktoolInputError("the output changed while it was read")
    monkeypatch.setattr(unchanged, "check_unchanged", changed)
    monkeypatch.setattr(load, "_conversions", lambda kwargs, name: _every_path(d))

    class Manifest:
        path, state = str(d), None
    with pytest.raises(PacktoolInputError):
        load._refuse_if_replaced(Manifest, {"cache_dir": str(d.parent)}, "conv", set())


CALLERS = {"leftovers.remove_tree": _by_remove_tree, "hf.load (to_hf refused)": _by_to_hf}


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize("written", WRITTEN)
def test_what_a_call_wrote_goes_and_nothing_a_link_reaches(tmp_path, monkeypatch, caller, written):
    if caller.startswith("hf"):
        pytest.importorskip("datasets", reason="the hf extra is not installed")
    theirs = _foreign(tmp_path)
    d = tmp_path / "hfc" / "parquet"  # where datasets keeps the parquet builder's conversions
    d.mkdir(parents=True)
    WRITTEN[written](d, theirs)
    asked = []
    real = removal.remove_written
    monkeypatch.setattr(removal, "remove_written", lambda *a, **k: asked.append(a) or real(*a, **k))
    CALLERS[caller](d, theirs, monkeypatch)
    assert asked, f"{caller} removes by its own loop, not output.removal.remove_written"
    assert (theirs / "keep.txt").read_bytes() == b"the user's"
    assert sorted(os.listdir(theirs)) == ["keep.txt"]
    left = os.listdir(d) if os.path.isdir(d) else []
    assert left == [], left


def test_a_path_reached_through_a_link_stays(tmp_path):
    """The link itself not among the paths (a user's, older than the call): what lies behind it
    is not the call's to remove."""
    theirs = _foreign(tmp_path)
    root = tmp_path / "cache"
    root.mkdir()
    os.symlink(theirs, root / "conv")
    removal.remove_written([str(root / "conv" / "keep.txt")], str(root))
    assert (theirs / "keep.txt").read_bytes() == b"the user's"


def test_a_path_outside_the_root_stays(tmp_path):
    theirs = _foreign(tmp_path)
    root = tmp_path / "cache"
    root.mkdir()
    removal.remove_written([str(theirs / "keep.txt")], str(root))
    assert (theirs / "keep.txt").read_bytes() == b"the user's"


def test_a_path_inside_a_removed_folder_made_again_by_another_writer_stays(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    (root / "conv").mkdir(parents=True)
    (root / "conv" / "a").write_bytes(b"ours")
    real = shutil.rmtree

    def another_writer_after(path, *a, **k):
        real(path, *a, **k)
        os.makedirs(os.path.join(path), exist_ok=True)
        with open(os.path.join(path, "a"), "wb") as f:
            f.write(b"another writer's")
    monkeypatch.setattr(removal.shutil, "rmtree", another_writer_after)
    removal.remove_written([str(root / "conv" / "a"), str(root / "conv")], str(root))
    assert (root / "conv" / "a").read_bytes() == b"another writer's"


def test_a_path_gone_already_is_no_error(tmp_path):
    removal.remove_written([str(tmp_path / "gone"), str(tmp_path / "gone" / "too")], str(tmp_path))


@pytest.mark.parametrize("root", [".", "sub", "./sub/"])
def test_relative_paths_are_the_same_folder(tmp_path, monkeypatch, root):
    monkeypatch.chdir(tmp_path)
    os.makedirs(os.path.join(root, "x"), exist_ok=True)
    removal.remove_written([os.path.join(root, "x")], root)
    assert not os.path.exists(os.path.join(root, "x"))
