"""Set-ups shared by the tests of what packtool writes and what its sweeps remove
(tests/packing/test_owned_leftovers.py, test_output_path.py, test_system_temp_sweep.py,
test_kill_windows.py): a dead pid, a previous packtool output as --overwrite checks it, a
folder or file carrying packtool's record as some run's, the system temp folder moved under
the test's folder, and a folder's contents to compare before and after. No tests here."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile

from packtool.output.leftovers import MARKER, XATTR, mark, mark_file
from packtool.slabs.format import FORMAT_NAME
from packtool.slabs.names import MANIFEST, shard_file
from packtool.slabs.schema import SCHEMA_VERSION
from packtool.tokenize.checksum import shard_checksum

USER = b"the user's own bytes\n"


def dead_pid() -> int:
    """A pid of this machine whose process has exited (and been reaped)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def packed_output(d, shards=(shard_file(0),), manifest: str = MANIFEST, tag: bytes = b"") -> str:
    """A packtool output as --overwrite checks it: listed shards with their size and checksum
    (`tag` makes one output's shard bytes differ from another's)."""
    os.makedirs(d, exist_ok=True)
    recs = []
    for s in shards:
        p = os.path.join(d, s)
        with open(p, "wb") as f:
            f.write(b"shard " + s.encode() + tag)
        recs.append({"file": s, "bytes": os.path.getsize(p), "xxh3_128": shard_checksum(p)})
    with open(os.path.join(d, manifest), "w") as f:
        json.dump(whole_manifest(recs), f)
    return str(d)


def whole_manifest(shards: list[dict]) -> dict:
    """A manifest with every field the format requires (slabs.fields) around `shards` (its
    counts 0 where not given): what --overwrite and the sweeps read is the shard list."""
    from dataclasses import fields

    from packtool.align import Alignment
    from packtool.planning.core import OverflowStats, PackingConfig, config_dict
    from packtool.slabs.fields import STATS
    stats = {k: 0 for k in STATS}
    stats.update(dp_imbalance=0.0, side_nan={}, side_inf={},
                 overflow={f.name: "error" if f.name == "policy" else 0 for f in fields(OverflowStats)},
                 skipped_rows={"empty": 0, "all_masked": 0},
                 changes={k: 0 for k in STATS["changes"]})
    return {"format": FORMAT_NAME, "schema_version": SCHEMA_VERSION, "config": config_dict(Alignment(), PackingConfig()),
            "tokenizer": {}, "input": {}, "stats": stats, "side_columns": [],
            "shards": [{"rows": 0, "tokens": 0, "loss_tokens": 0, **r} for r in shards]}


def _as_run(rec: dict, pid: int, over: dict) -> dict:
    # "1": not the start time of `pid` (a dead run's, or a pid reused by a later process)
    return dict(rec, pid=pid, start=rec["start"] if pid == os.getpid() else "1", **over)


def own_folder(d, pid: int, **over) -> None:
    """The marker packtool writes (the one already there, if packtool made it), as run `pid`
    of this machine unless `over` says else (host, boot, pidns)."""
    m = os.path.join(d, MARKER)
    if not os.path.exists(m):
        mark(str(d))
    with open(m) as f:
        rec = json.load(f)
    with open(m, "w") as f:
        json.dump(_as_run(rec, pid, over), f)


def own_file(p, pid: int, **over) -> None:
    """The record a temporary file carries (an extended attribute), as run `pid`."""
    fd = os.open(p, os.O_RDONLY)
    try:
        assert mark_file(fd), "this file system keeps no user attributes"
    finally:
        os.close(fd)
    rec = json.loads(os.getxattr(p, XATTR))
    os.setxattr(p, XATTR, json.dumps(_as_run(rec, pid, over)).encode())


def use_system_temp(monkeypatch, d) -> str:
    """The system temp folder (TMPDIR, tempfile's) moved to `d`, made if missing."""
    os.makedirs(d, exist_ok=True)
    monkeypatch.setenv("TMPDIR", str(d))
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return str(d)


def tree(root, records: bool = False) -> dict:
    """Every entry under `root` (or a file's own bytes): a link's target, a file's bytes, None
    for a folder; `records`: with whether packtool's record is on each entry."""
    if os.path.isfile(root):
        return {"": open(root, "rb").read()}
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                out[rel] = ("link", os.readlink(p))
                continue
            what = open(p, "rb").read() if os.path.isfile(p) else None
            out[rel] = (what, XATTR in os.listxattr(p, follow_symlinks=False)) if records else what
    return out


def snapshot(root, skip=("cache",)) -> dict:
    """Every entry under `root` with what it holds, to compare a folder before and after a run:
    a file's bytes, b"" for a folder (its name ending in /), a link's target (never followed: a
    dangling one is an entry too), a FIFO or other special file by its kind (never opened: it
    would block). Folders named in `skip` are left out (the tokenized cache, which a run may
    fill); `root` a file: that one entry, under ""."""
    def held(p, st):
        if stat.S_ISLNK(st.st_mode):
            return ("link", os.readlink(p))
        if stat.S_ISREG(st.st_mode):
            with open(p, "rb") as f:
                return f.read()
        return b"" if stat.S_ISDIR(st.st_mode) else ("kind", stat.S_IFMT(st.st_mode))
    if not os.path.isdir(root) or os.path.islink(root):
        return {"": held(root, os.lstat(root))} if os.path.lexists(root) else {}
    out = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in skip]
        for n in dirs + files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            out[os.path.relpath(p, root) + ("/" if stat.S_ISDIR(st.st_mode) else "")] = held(p, st)
    return out