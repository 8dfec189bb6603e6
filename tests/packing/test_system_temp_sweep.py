"""Every sweep of leftovers (output.stale: beside the output, the system temp folder, the
cache) removes only what packtool proves it made (output.leftovers' marker: this machine, a
dead process, only packtool's names), never a user's lookalike, and names both."""
from __future__ import annotations

import json
import os

import pytest
from leftover_support import dead_pid, own_folder, tree, use_system_temp

from packtool import notes
from packtool.output.folder import spill_dir, temp_dir
from packtool.output.leftovers import MARKER
from packtool.output.stale import clean_cache, clean_stale, clean_system_temp
from packtool.output.store import scratch, staging_dir


# (where the folder lies, its name for a pid, a file packtool writes in it, the sweep that looks)
SITES = {
    "beside-tmp": ("out", ".o.packtool-tmp-{pid}-x1", "slabs-00000.parquet", "stale"),
    "beside-spill": ("out", ".o.packtool-spill-{pid}-x1", "plan.pkl", "stale"),
    "system-tmp": ("sys", "packtool-tmp-{pid}-x1", ".manifest.json", "stale"),
    "system-spill": ("sys", "packtool-spill-{pid}-x1", "placement-00000.npy", "system"),
    "system-part": ("sys", "packtool-part-{pid}-x1", "data", "system"),  # engines.ray_cache: data/part-*
    "cache-build": ("cache", ".tmp-0123456789ab-{pid}-x1", "cache.json", "stale"),
    "cache-pull": ("cache", ".pull-0123456789ab-{pid}-x1", "data", "cache"),
    "cache-damaged": ("cache", "0123abcd.damaged-{pid}", "flat", "cache"),
    "verify-source": ("cache", ".verify-source-{pid}-x1", "0123456789abcdef", "cache"),
    "flat-build": ("cache", "0123abcd/flat.tmp-{pid}-x1", "tokens.i32", "stale"),
}
CASES = ("user-lookalike", "dead-own", "pid-reused", "live-own", "other-host", "other-boot",
         "other-pid-namespace", "symlink-inside", "user-file-inside")
OTHER = {"other-host": {"host": "another-host"}, "other-boot": {"boot": "0" * 32},
         "other-pid-namespace": {"pidns": "pid:[1]"}}


@pytest.fixture
def roots(tmp_path, monkeypatch):
    sys_tmp = tmp_path / "systmp"
    use_system_temp(monkeypatch, sys_tmp)
    (tmp_path / "cache").mkdir()
    return {"out": tmp_path, "sys": sys_tmp, "cache": tmp_path / "cache"}


def _sweep(kind: str, roots) -> None:
    if kind == "stale":
        clean_stale(str(roots["out"] / "o"), str(roots["cache"]))
    elif kind == "system":
        clean_system_temp()
    else:
        clean_cache(str(roots["cache"]))


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("site", SITES)
def test_a_sweep_removes_only_what_packtool_proves_its_own(roots, tmp_path, site, case):
    where, name, ours, kind = SITES[site]
    pid = {"live-own": os.getpid(), "pid-reused": os.getppid()}.get(case) or dead_pid()
    folder = roots[where] / name.format(pid=pid)
    folder.mkdir(parents=True)
    user = tmp_path / "user-data.txt"
    user.write_bytes(b"the user's thesis\n")
    if case == "user-lookalike":
        (folder / "results.csv").write_bytes(b"a,b\n1,2\n")
        (folder / "sub").mkdir()
        (folder / "sub" / "notes.tex").write_bytes(b"\\section{x}\n")
    else:
        (folder / ours).write_bytes(b"packtool's bytes")
        own_folder(folder, pid, **OTHER.get(case, {}))
        if case == "symlink-inside":
            os.symlink(user, folder / "link")
        if case == "user-file-inside":
            (folder / "mine.txt").write_bytes(b"user's, written into it later\n")
    before, start = tree(tmp_path), notes.mark()
    _sweep(kind, roots)
    said = "\n".join(notes.since(start))
    assert user.read_bytes() == b"the user's thesis\n"
    if case in ("dead-own", "pid-reused"):
        assert not os.path.lexists(folder)
        assert f"removed 1 temporary folder(s)" in said and str(folder) in said
        return
    assert tree(tmp_path) == before  # byte-identical, links unfollowed and kept
    if case == "live-own":
        assert str(folder) not in said  # a running run's folder is no leftover
    else:
        assert f"left {folder}:" in said and f"rm -r {folder}" in said and "removed" not in said


def test_many_left_folders_are_named_a_few_then_counted(roots):
    dead = dead_pid()
    for i in range(8):
        (roots["sys"] / f"packtool-results-{dead}-{i}").mkdir()
    start = notes.mark()
    assert clean_system_temp() == 0
    said = notes.since(start)
    assert len(said) == 6 and "left 3 more" in said[-1] and f"packtool-results-{dead}-7" in said[-1]
    assert len(os.listdir(roots["sys"])) == 8


def test_every_temporary_folder_packtool_makes_carries_its_marker(roots):
    out = str(roots["out"] / "o")
    made = [temp_dir(out), spill_dir(out), spill_dir(None), staging_dir(out, "tmp")]
    with scratch("part") as d:
        made.append(d)
        for p in made:
            rec = json.loads(open(os.path.join(p, MARKER)).read())
            assert rec["pid"] == os.getpid() and rec["host"] and len(rec["token"]) == 32
        start = notes.mark()
        clean_stale(out, str(roots["cache"]))  # all live: left alone, said nothing
        assert notes.since(start) == [] and all(os.path.isdir(p) for p in made)
