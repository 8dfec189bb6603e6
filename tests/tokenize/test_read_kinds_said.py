"""RA-8 (s50): what packtool reads was said three ways: READ_KINDS (file_kinds: .pq, .ndjson,
.jsonlines, .ipc) at the store doors, shorter hand-copied lists at the local file, folder and
glob doors and a store prefix or glob of nothing readable. Every door that says which kinds it
reads says READ_KINDS, local and on a store (file://)."""
from __future__ import annotations

import pytest

import packtool
from packtool.tokenize.file_kinds import READ_KINDS

DOORS = {"a file": "u.txt", "a folder": "d", "a glob": "d/*", "a file on a store": "file://{t}/u.txt",
         "a prefix": "file://{t}/d/", "a store glob": "file://{t}/d/*"}


@pytest.mark.parametrize("door", list(DOORS))
def test_every_door_says_the_kinds_packtool_reads(tmp_path, door):
    (tmp_path / "u.txt").write_text("x\n")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "notes.txt").write_text("x\n")
    spec = DOORS[door].format(t=tmp_path)
    spec = spec if spec.startswith("file://") else str(tmp_path / spec)
    with pytest.raises(packtool.PacktoolError) as e:
        packtool.pack([spec], dry_run=True, cache_dir=str(tmp_path / "c"))
    assert READ_KINDS in str(e.value), str(e.value)
