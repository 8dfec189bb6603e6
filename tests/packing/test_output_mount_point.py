"""S50A-3: `pack -o DIR` where DIR is an empty mount point (a container's volume, a tmpfs) packed
everything, then failed at the swap ("Device or resource busy": a mount point cannot be renamed)
and left its marker in DIR, which every later run, --overwrite too, called a user's file. Now a
mount point is refused before any work, naming --output and a folder inside it; a swap whose
set-aside rename fails leaves the previous output as it was, without packtool's marker; and a
folder holding a dead run's marker alone is packtool's to take."""
from __future__ import annotations

import errno
import os
import subprocess

import pytest
from conftest import GPT2, PEPS
from leftover_support import dead_pid, own_folder, tree

import packtool.output.folder as folder_mod
from packtool.align import Alignment
from packtool.errors import PacktoolOutputError
from packtool.output.leftovers import MARKER
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig

ARGS = ([PEPS], Alignment(capacity=1024), PackingConfig("bfd", overflow="split"), TokenizeConfig(tokenizer=GPT2))


def _pack(out, cache, **kw):
    return pack(*ARGS, output=str(out), cache_dir=str(cache), **kw)


@pytest.fixture
def mount_point(tmp_path):
    host, mp = tmp_path / "host", tmp_path / "mp"
    host.mkdir(), mp.mkdir()
    if subprocess.run(["mount", "--bind", str(host), str(mp)], capture_output=True).returncode:
        pytest.skip("bind mounts need root here")
    yield mp
    subprocess.run(["umount", str(mp)], check=True)


@pytest.mark.parametrize("previous", [False, True], ids=["empty", "a previous output"])
def test_a_mount_point_is_refused_before_any_work(mount_point, tmp_path, previous, monkeypatch):
    if previous:  # packed in place by hand, as a volume holding an earlier output would
        done = _pack(tmp_path / "o", tmp_path / "c")
        for s in [*done.shards, None]:
            name = s.file if s else ".manifest.json"
            (mount_point / name).write_bytes((tmp_path / "o" / name).read_bytes())
    before = tree(mount_point, records=True)
    monkeypatch.setattr("packtool.packing.tokenize_to_cache", lambda *a, **k: pytest.fail("work began"))
    with pytest.raises(PacktoolOutputError) as e:
        _pack(mount_point, tmp_path / "c", overwrite=True)
    text = str(e.value)
    assert "mount point" in text and os.path.join(str(mount_point), "packed") in text and "\n" not in text, text
    assert tree(mount_point, records=True) == before
    if previous:
        return
    monkeypatch.undo()
    _pack(mount_point / "packed", tmp_path / "c")  # the fix it names works
    assert (mount_point / "packed" / ".manifest.json").is_file()


def test_a_failed_set_aside_leaves_the_previous_output_without_packtools_marker(tmp_path, monkeypatch):
    out, cache = tmp_path / "o", tmp_path / "c"
    _pack(out, cache)
    before = tree(out)
    real = os.replace

    def busy(src, dst):
        if str(src) == str(out):
            raise OSError(errno.EBUSY, os.strerror(errno.EBUSY))
        return real(src, dst)
    monkeypatch.setattr(folder_mod.os, "replace", busy)
    with pytest.raises(PacktoolOutputError, match="cannot be set aside.*Device or resource busy.*is as it was"):
        _pack(out, cache, overwrite=True)
    assert tree(out) == before and MARKER not in os.listdir(out)
    monkeypatch.undo()
    _pack(out, cache, overwrite=True)


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_folder_holding_a_dead_runs_marker_alone_is_taken(tmp_path, overwrite):
    out = tmp_path / "o"
    out.mkdir()
    own_folder(out, dead_pid())
    res = _pack(out, tmp_path / "c", overwrite=overwrite)
    assert sorted(os.listdir(out)) == sorted([".manifest.json", *(s.file for s in res.shards)])


@pytest.fixture
def mounted_file(tmp_path):
    host, target = tmp_path / "host.json", tmp_path / "plan.json"
    host.write_text("the host's file\n"), target.write_text("")
    if subprocess.run(["mount", "--bind", str(host), str(target)], capture_output=True).returncode:
        pytest.skip("bind mounts need root here")
    yield target
    subprocess.run(["umount", str(target)], check=True)


@pytest.mark.parametrize("flag", ["plan", "inspect_html", "save"])
def test_a_file_target_that_is_a_mount_point_is_refused_before_any_work(mounted_file, flag):
    from packtool.output.paths import check_new_file
    with pytest.raises(PacktoolOutputError, match="is a mount point") as e:
        check_new_file(str(mounted_file), flag, replace=True)
    assert "\n" not in str(e.value) and mounted_file.read_text() == "the host's file\n"


def test_a_mounted_log_is_written_in_place(mounted_file):
    """R2B-7: a log (--json-log) is opened and written where it is, never renamed into place:
    a file a container mounts for it is taken."""
    from packtool.output.paths import check_log_file
    assert check_log_file(str(mounted_file), "json_log", replace=True) is False
