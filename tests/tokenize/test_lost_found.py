"""RA-9: every ext2/3/4 data disk's root holds lost+found (root's, mode 0700): `pack /mnt/data` (or
`/mnt/data/**/*.jsonl`) as a user was refused "cannot be listed ... give packtool read access to it,
or pass the files to read themselves", fixes no user can take. A filesystem's lost+found at its
mount point is passed over with a note; any other folder that cannot be listed (a lost+found that
is no mount's, one that fails with EIO) is still refused."""
from __future__ import annotations

import errno
import json
import os

import pytest

from packtool import notes
from packtool.errors import PacktoolInputError
from packtool.tokenize.readers import resolve_inputs


def _disk(tmp_path, monkeypatch, mount: bool, error: int = errno.EACCES, name: str = "lost+found") -> str:
    """tmp/mnt as a data disk's root: a.jsonl, and `name` that cannot be listed (the box runs as
    root: chmod 000 would not stop it); `mount`: tmp/mnt is a mount point."""
    d = tmp_path / "mnt"
    (d / name).mkdir(parents=True)
    (d / "a.jsonl").write_text(json.dumps({"text": "a"}) + "\n")
    shut, root = str(d / name), str(d)
    scandir, ismount = os.scandir, os.path.ismount

    def refusing(path="."):
        if os.path.realpath(path) == shut:
            raise (PermissionError if error == errno.EACCES else OSError)(error, os.strerror(error), path)
        return scandir(path)
    monkeypatch.setattr(os, "scandir", refusing)
    monkeypatch.setattr(os.path, "ismount", lambda p: (mount and os.path.abspath(p) == root) or ismount(p))
    return root


DOORS = {"folder": lambda d: d, "** glob": lambda d: os.path.join(d, "**", "*.jsonl")}


# RA-11: a data disk is usually named through a link to its mount point (/data -> /mnt/disk1), which
# ismount never calls a mount: its lost+found was refused again
@pytest.mark.parametrize("spelled", ["as itself", "through a link"])
@pytest.mark.parametrize("door", DOORS)
def test_a_mounts_lost_found_is_passed_over_with_a_note(tmp_path, monkeypatch, door, spelled):
    d = _disk(tmp_path, monkeypatch, mount=True)
    if spelled == "through a link":
        os.symlink(d, tmp_path / "data")
        d = str(tmp_path / "data")
    start = notes.mark()
    assert [f.path for f in resolve_inputs([DOORS[door](d)])] == [os.path.join(d, "a.jsonl")]
    said = [n for n in notes.since(start) if "lost+found" in n]
    assert len(said) == 1 and "mount point" in said[0] and os.path.join(d, "lost+found") in said[0], said


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("case", ["no mount point", "EIO", "another name"])
def test_any_other_folder_that_cannot_be_listed_is_still_refused(tmp_path, monkeypatch, door, case):
    d = _disk(tmp_path, monkeypatch, mount=case != "no mount point", error=errno.EIO if case == "EIO" else errno.EACCES,
              name="private" if case == "another name" else "lost+found")
    with pytest.raises(PacktoolInputError, match="cannot be listed"):
        resolve_inputs([DOORS[door](d)])
