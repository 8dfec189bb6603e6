"""packtool.output: which folders `pack` may write, the lock, the clean-up after dead runs
(only folders packtool named, only of dead processes), the swap that never deletes a file
packtool did not write, and the error hierarchy."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from leftover_support import dead_pid, own_folder, packed_output

from packtool.errors import PacktoolError, PacktoolFormatError, PacktoolOutputError
from packtool.output.folder import (
    OutputExistsError,
    check_output,
    claim_output,
    clean_stale,
    lock_path,
    owned_names,
    spill_dir,
    swap_into_place,
    temp_dir,
)
from packtool.slabs.format import FormatError
from packtool.slabs.names import MANIFEST


def test_error_hierarchy():
    from packtool.align import AlignmentError
    from packtool.errors import PacktoolConfigError, PacktoolInputError
    from packtool.inspection.report import InspectError
    from packtool.packers import DPError
    from packtool.planning.core import PlanError
    from packtool.tokenize.cache import CacheDamagedError
    assert issubclass(FormatError, PacktoolFormatError)
    assert issubclass(AlignmentError, PacktoolConfigError) and issubclass(PlanError, PacktoolConfigError)
    assert issubclass(InspectError, PacktoolInputError) and issubclass(DPError, PacktoolConfigError)
    assert CacheDamagedError("x").kind == "cache"
    assert issubclass(OutputExistsError, PacktoolOutputError) and issubclass(OutputExistsError, FileExistsError)
    for cls in (FormatError, AlignmentError, PlanError, InspectError, OutputExistsError, PacktoolInputError):
        assert issubclass(cls, PacktoolError) and cls("x").exit_code == 2
    e = PacktoolInputError("bad\nvalue", path="a.jsonl", row=3, flag="--shape")
    assert str(e) == "a.jsonl, row 3: bad value (see --shape) (rows count from 0)"
    assert e.to_dict()["error"] | {} == {"kind": "input", "type": "PacktoolInputError", "message": str(e),
                                         "path": "a.jsonl", "row": 3, "flag": "--shape", "exit_code": 2}


def test_new_empty_and_previous_outputs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert check_output(str(tmp_path / "new" / "deeper")) == []
    (tmp_path / "empty").mkdir()
    assert check_output(str(tmp_path / "empty")) == []
    prev = packed_output(str(tmp_path / "prev"), ("slabs-00000.parquet", "slabs-00001.parquet"))
    with pytest.raises(OutputExistsError, match="overwrite=True"):
        check_output(prev)
    assert check_output(prev, overwrite=True) == [MANIFEST, "slabs-00000.parquet", "slabs-00001.parquet"]


def test_symlink_to_the_working_directory_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.symlink(tmp_path, tmp_path / "here")
    with pytest.raises(PacktoolOutputError, match="working directory"):
        check_output(str(tmp_path / "here"), overwrite=True)


def test_glob_input_inside_output_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.jsonl").write_text("{}\n")
    with pytest.raises(PacktoolOutputError, match="holds the input"):
        check_output(str(tmp_path / "d"), overwrite=True, inputs=[str(tmp_path / "d" / "*.jsonl")])


def test_lock_is_exclusive_reentrant_and_removed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = str(tmp_path / "out")
    code = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); "
            "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)")
    with claim_output(out):
        assert os.path.exists(lock_path(out))
        with claim_output(out):  # pack -> pack_cache
            pass
        r = subprocess.run([sys.executable, "-c", code, lock_path(out)], capture_output=True, text=True)
        assert r.returncode != 0 and "BlockingIOError" in r.stderr  # another process cannot take it
    assert not os.path.exists(lock_path(out))


def test_clean_stale_removes_only_dead_packtool_folders(tmp_path, capsys):
    """Names decide where a sweep looks; the marker (tests/packing/test_system_temp_sweep.py)
    decides what goes."""
    out = str(tmp_path / "out")
    dead, live = dead_pid(), os.getpid()
    ours_dead = [f".out.packtool-tmp-{dead}", f".out.packtool-spill-{dead}-abc123"]
    kept = [f".out.packtool-tmp-{live}", ".out.backup", f".other.packtool-tmp-{dead}", "out.packtool-tmp-1",
            f".out.packtool-tmp-{dead}x"]
    cache = tmp_path / "cache"
    ours_cache = [cache / f".tmp-0123456789ab-{dead}-xyz", cache / "abcd" / f"flat.tmp-{dead}",
                  cache / f"abcd.damaged-{dead}"]
    for p in [tmp_path / n for n in ours_dead + kept] + ours_cache:
        os.makedirs(p)
        # a live run's (this process) for that one
        own_folder(p, live if p.name == f".out.packtool-tmp-{live}" else dead)
    (cache / f".tmp-0123456789ab-{live}-xyz").mkdir()
    own_folder(cache / f".tmp-0123456789ab-{live}-xyz", live)
    (cache / "abcd" / "flat").mkdir()
    assert clean_stale(out, str(cache)) == 5
    assert sorted(os.listdir(tmp_path)) == sorted(kept + ["cache"])
    assert sorted(os.listdir(cache)) == sorted(["abcd", f".tmp-0123456789ab-{live}-xyz"])
    assert os.listdir(cache / "abcd") == ["flat"]
    assert capsys.readouterr().err.count("removed 5 temporary folder(s)") == 1


def test_clean_stale_restores_an_output_set_aside_by_a_killed_swap(tmp_path, capsys):
    out = str(tmp_path / "out")
    from packtool.output.leftovers import MARKER
    dead = dead_pid()
    old = packed_output(str(tmp_path / f".out.packtool-tmp-{dead}.old"))
    own_folder(old, dead)  # as folder.swap_into_place marks what it sets aside; the run `dead`'s
    before = {f: open(os.path.join(old, f), "rb").read() for f in os.listdir(old) if f != MARKER}
    clean_stale(out)
    assert {f: open(os.path.join(out, f), "rb").read() for f in os.listdir(out)} == before
    assert "restored" in capsys.readouterr().err


def test_swap_keeps_files_that_appeared_and_refuses(tmp_path):
    out = packed_output(str(tmp_path / "out"))
    tmp = packed_output(temp_dir(out), ("slabs-00000.parquet", "slabs-00001.parquet"))
    (tmp_path / "out" / "late.txt").write_text("written by the user mid-run")
    with pytest.raises(PacktoolOutputError, match="late.txt"):
        swap_into_place(tmp, out)
    assert (tmp_path / "out" / "late.txt").exists()
    os.remove(tmp_path / "out" / "late.txt")
    swap_into_place(tmp, out)
    assert sorted(os.listdir(out)) == [MANIFEST, "slabs-00000.parquet", "slabs-00001.parquet"]
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_temp_and_spill_carry_the_pid(tmp_path):
    out = str(tmp_path / "o")
    assert os.path.basename(temp_dir(out)).startswith(f".o.packtool-tmp-{os.getpid()}-")
    assert os.path.basename(spill_dir(out)).startswith(f".o.packtool-spill-{os.getpid()}-")


def test_owned_names_refuses_foreign_and_unreadable(tmp_path):
    d = packed_output(str(tmp_path / "o"))
    (tmp_path / "o" / ".DS_Store").write_text("")
    with pytest.raises(PacktoolOutputError, match=r"also holds: \.DS_Store"):
        owned_names(d)
    (tmp_path / "o" / MANIFEST).write_text("[]")
    with pytest.raises(PacktoolOutputError, match="not a packtool output"):
        owned_names(d)


def test_an_older_output_with_manifest_json_is_replaceable(tmp_path, monkeypatch):
    from packtool.slabs.names import LEGACY_MANIFEST
    monkeypatch.chdir(tmp_path)
    d = packed_output(str(tmp_path / "old"))
    os.replace(os.path.join(d, MANIFEST), os.path.join(d, LEGACY_MANIFEST))
    assert check_output(d, overwrite=True) == [LEGACY_MANIFEST, "slabs-00000.parquet"]
