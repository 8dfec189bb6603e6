"""Proof that a temporary folder is packtool's, and the sweep that removes only those.

A name is no proof: a user may call a folder `packtool-results-2026` or `.out.packtool-tmp-9-x`,
and a pid probe (`kill(pid, 0)`) answers for this PID namespace only, not for a container or a
host sharing the folder. So every temporary folder packtool makes gets a marker file at
creation (`MARKER`: a random token, hostname, boot id, PID namespace, pid and the process's
start time), taken out again just before the folder is published under its final name. A
sweep removes a folder only when the marker parses, names this machine, boot and PID namespace,
its process is gone (or the pid now belongs to a later process), and the folder holds only
plain files and folders under names packtool writes there. Everything else is left, and said.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import stat
import tempfile

from packtool.notes import note

MARKER = ".packtool-owner"
SHOWN = 5  # folders named one by one in a note; the rest counted
LIVE = "live"  # a running packtool's folder: left without a word


def _read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(4096).decode("ascii", "replace").strip()
    except OSError:
        return ""


def _start_time(pid: int) -> str:
    """The process's start (clock ticks since boot, /proc/PID/stat field 22): a pid reused by
    a later process has another."""
    text = _read(f"/proc/{pid}/stat")
    fields = text.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else ""


def _machine() -> dict:
    try:
        ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        ns = ""
    return {"host": socket.gethostname(), "boot": _read("/proc/sys/kernel/random/boot_id"), "pidns": ns}


def mark(folder: str) -> None:
    """Write the marker into a folder this process just made (exclusively, never through a link)."""
    pid = os.getpid()
    rec = dict(_machine(), token=os.urandom(16).hex(), pid=pid, start=_start_time(pid))
    fd = os.open(os.path.join(folder, MARKER), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(rec, f)


def unmark(folder: str) -> None:
    """Take the marker out before the folder is published (an output, a cache entry): the
    published folder is the user's, not a leftover."""
    try:
        os.unlink(os.path.join(folder, MARKER))
    except FileNotFoundError:
        pass


def owned_temp_dir(prefix: str, dir: str | None = None) -> str:
    """`tempfile.mkdtemp` (private, exclusive), marked as this run's."""
    d = tempfile.mkdtemp(prefix=prefix, dir=dir)
    mark(d)
    return d


def _marker(folder: str) -> dict | None:
    try:
        fd = os.open(os.path.join(folder, MARKER), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        try:
            rec = json.loads(f.read(4096))
        except ValueError:
            return None
    ok = isinstance(rec, dict) and isinstance(rec.get("pid"), int) and isinstance(rec.get("token"), str)
    return rec if ok else None


def _alive(pid: int, start: str) -> bool:
    if pid == os.getpid():
        return True
    if os.path.isdir("/proc/self"):
        now = _start_time(pid)
        return bool(now) and now == start
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _foreign(folder: str, names: re.Pattern) -> str | None:
    """The first entry packtool does not write in such a folder: a link, a special file, or a
    top-level name outside `names`."""
    for d, dirs, files in os.walk(folder):
        for n in dirs + files:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, folder)
            if d == folder and n == MARKER:
                continue
            mode = os.lstat(p).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                return f"{rel} ({'a symbolic link' if stat.S_ISLNK(mode) else 'not a plain file'})"
            if d == folder and not names.match(n):
                return rel
    return None


def judge(path: str, names: re.Pattern) -> str | None:
    """None when `path` is provably a dead packtool run's temporary folder; else why it stays
    (`LIVE` for a running run's)."""
    try:
        st = os.lstat(path)
    except OSError:
        return LIVE  # gone already
    if not stat.S_ISDIR(st.st_mode):
        return "not a folder packtool made (a link or a file)"
    if st.st_uid != os.geteuid():
        return LIVE  # another user's: theirs to remove
    rec = _marker(path)
    if rec is None:
        return "no packtool marker in it (made by an older packtool, or not by packtool)"
    here = _machine()
    if any(rec.get(k) != here[k] for k in here):
        return (f"made on host {rec.get('host')!r} (another machine, boot or container): packtool "
                f"cannot tell whether that run still lives")
    if _alive(rec["pid"], str(rec.get("start", ""))):
        return LIVE
    bad = _foreign(path, names)
    return f"it holds {bad}, which packtool does not write there" if bad else None


def remove_tree(path: str) -> None:
    """Remove a folder judged packtool's; links inside are removed as links, never followed."""
    if os.path.islink(path):
        return
    shutil.rmtree(path, ignore_errors=True)


class Sweep:
    """One run's sweep of leftovers: removes what `judge` proves packtool's, keeps the rest,
    and says both by name (`report`)."""

    def __init__(self) -> None:
        self.removed: list[str] = []
        self.left: list[tuple[str, str]] = []

    def consider(self, path: str, names: re.Pattern) -> bool:
        why = judge(path, names)
        if why is None:
            remove_tree(path)
            self.removed.append(path)
            return True
        if why != LIVE:
            self.left.append((path, why))
        return False

    def report(self) -> int:
        if self.removed:
            note(f"removed {len(self.removed)} temporary folder(s) left by packtool runs that were "
                 f"killed: {_listed(self.removed)}")
        for path, why in self.left[:SHOWN]:
            note(f"left {path}: it looks like a packtool temporary folder, but {why}; if no "
                 f"packtool run is using it, remove it by hand (rm -r {shlex.quote(path)})")
        if len(self.left) > SHOWN:
            note(f"left {len(self.left) - SHOWN} more such folder(s) packtool cannot prove it made: "
                 f"{_listed([p for p, _ in self.left[SHOWN:]])}")
        return len(self.removed)


def _listed(paths: list[str]) -> str:
    more = len(paths) - SHOWN
    return ", ".join(paths[:SHOWN]) + (f" and {more} more" if more > 0 else "")


__all__ = ["LIVE", "MARKER", "Sweep", "judge", "mark", "owned_temp_dir", "remove_tree", "unmark"]
