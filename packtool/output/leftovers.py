"""Proof that a temporary folder is packtool's, and the sweep that removes only those.

A name is no proof: a user may call a folder `packtool-results-2026` or `.out.packtool-tmp-9-x`,
and a pid probe (`kill(pid, 0)`) answers for this PID namespace only, not for a container or a
host sharing the folder. So every temporary folder packtool makes gets a marker file at
creation (`MARKER`: a random token, hostname, boot id, PID namespace, pid and the process's
start time), taken out again just before the folder is published under its final name. A
sweep removes a folder only when the marker parses, names this machine, boot and PID namespace,
its process is gone (or the pid now belongs to a later process), and the folder holds only
plain files and folders under names packtool writes there. Everything else is left, and said.

A single temporary file (files.write_file's `.NAME.packtool-tmp-PID-HEX`) carries the same
record as an extended attribute (`XATTR`), set on the open file before a byte is written and
taken off before it is published: no second name to create or lose, and a user's file of the
same name has none. Where the file system keeps no user attributes the temporary carries no
proof, and a killed run's is named, never removed.

A kill (SIGKILL runs no clean-up) may land between any two steps, so the record goes on before
an intermediate can be seen under a name a sweep looks at, and comes off only after it is
under its final name: a folder is renamed with its marker in it (`unmark` follows the rename;
a previous output is marked before it is set aside), a file keeps its attribute until it is
published, and a removal takes the marker out last (`remove_tree`). What a kill between two of
those steps can leave is then always provable: a marked temporary; a published folder or file
still holding a dead run's record (`drop_dead_record`: only the record goes); or an empty
folder under a temporary's name whose pid (in the name) is gone, which a sweep removes with
`rmdir` alone (`EMPTY`: the kernel refuses it if anything is inside, so no byte can go).
"""
from __future__ import annotations

import contextlib
import json
import os
import shlex
import socket
import stat
import tempfile

from typing import Callable

from packtool.notes import note
from packtool.output import removal
from packtool.pids import plausible_pid

MARKER = ".packtool-owner"
# a single temporary file's record (files.write_file): an extended attribute on its inode, so
# the proof needs no second name to create, sweep or lose, and goes wherever the file goes
XATTR = "user.packtool.owner"
Names = Callable[[str], object]  # which top-level names packtool writes in a kind of folder
SHOWN = 5  # folders named one by one in a note; the rest counted
LIVE = "live"  # a running packtool's folder: left without a word
EMPTY = "empty"  # an empty folder under a temporary's name of a gone pid: removed by rmdir alone


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


def _record() -> bytes:
    pid = os.getpid()
    return json.dumps(dict(_machine(), token=os.urandom(16).hex(), pid=pid, start=_start_time(pid))).encode()


def mark(folder: str, made: bool = False) -> None:
    """Write the marker into a folder this process just made (exclusively, never through a link).
    A marker it could not fill (a full disk, `ulimit -f`) is removed, with the folder when `made`
    (this run's, still empty): left, no later run could prove them packtool's (S49A-8). The
    error then names the marker, for the place's argument in its line."""
    path = os.path.join(folder, MARKER)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_record())
    except OSError as e:
        for gone in (lambda: os.unlink(path), lambda: made and os.rmdir(folder)):
            try:
                gone()
            except OSError:
                pass
        raise OSError(e.errno, e.strerror, path) from None


def mark_file(fd: int) -> bool:
    """Record on a temporary file this process just created (its open `fd`) that this run
    made it. False where the file system keeps no user attributes (FAT, some network
    mounts): such a temporary, left by a killed run, is never removed, only named."""
    try:
        os.setxattr(fd, XATTR, _record())
    except OSError:
        return False
    return True


def unmark_file(path: str | int) -> None:
    """Take the record off a file (its path, or its open descriptor) once it is published: the
    published file is the user's. A descriptor reaches the inode that was published, whatever
    its name shows meanwhile."""
    try:
        if isinstance(path, int):
            os.removexattr(path, XATTR)
        else:
            os.removexattr(path, XATTR, follow_symlinks=False)
    except OSError:
        pass


def unmark(folder: str) -> None:
    """Take the marker out of a folder once it is under its final name (an output, a cache
    entry): the published folder is the user's, not a leftover. Never before the rename: a
    kill between the two would leave the temporary unproven."""
    try:
        os.unlink(os.path.join(folder, MARKER))
    except FileNotFoundError:
        pass


def has_marker(folder: str) -> bool:
    """Whether `folder` holds a marker packtool wrote (of any run): a published folder may, if
    a kill came between its rename and `unmark`, and the marker is then packtool's file there."""
    return _marker(folder) is not None


def drop_dead_record(path: str) -> bool:
    """Take a dead run's record off a published folder (its marker file) or file (its
    attribute), left by a kill between the publishing rename and `unmark` / `unmark_file`;
    only the record goes, on the same proof a sweep asks. True when it dropped one."""
    if os.path.isdir(path) and not os.path.islink(path):
        if _dead_run(_marker(path), "") is not None:
            return False
        unmark(path)
        return True
    if _dead_run(_file_record(path), "") is not None:
        return False
    unmark_file(path)
    return True


def owned_temp_dir(prefix: str, dir: str | None = None, made: list[str] = ()) -> str:
    """`tempfile.mkdtemp` (private, exclusive), marked as this run's. `made`: the folders this run
    made for `dir` (make_parents), removed when no temporary can be made there (S50A-1)."""
    try:
        d = tempfile.mkdtemp(prefix=prefix, dir=dir)
        mark(d, made=True)
    except BaseException:
        for p in sorted(made, key=len, reverse=True):  # writes.remove_created's rule (writes imports this)
            with contextlib.suppress(OSError):
                os.rmdir(p)
        raise
    return d


def made_here(folder: str) -> bool:
    """Whether `folder` is a temporary this very process made and still holds (its marker names
    this machine, boot, PID namespace, pid and start): the one a caller may hand on as a
    writer's own place (verify --source's cache); one of any other run is removed by its run or
    the next sweep."""
    rec, pid = _marker(folder), os.getpid()
    here = dict(_machine(), pid=pid, start=_start_time(pid))
    return rec is not None and all(rec.get(k) == v for k, v in here.items())


def _marker(folder: str) -> dict | None:
    try:
        fd = os.open(os.path.join(folder, MARKER), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        return _parsed(f.read(4096))


def _file_record(path: str) -> dict | None:
    try:
        return _parsed(os.getxattr(path, XATTR, follow_symlinks=False))
    except OSError:  # no such attribute, or a file system without them
        return None


def _parsed(data: bytes) -> dict | None:
    try:
        rec = json.loads(data)
    except ValueError:
        return None
    ok = isinstance(rec, dict) and isinstance(rec.get("pid"), int) and isinstance(rec.get("token"), str)
    return rec if ok else None


def _empty(folder: str) -> bool:
    try:
        return not os.listdir(folder)
    except OSError:
        return False


def _pid_alive(pid: int) -> bool:
    """Whether a process `pid` runs in this PID namespace (a name's pid: no start time)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _alive(pid: int, start: str) -> bool:
    if pid == os.getpid():
        return True
    if os.path.isdir("/proc/self"):
        now = _start_time(pid)
        return bool(now) and now == start
    return _pid_alive(pid)  # no /proc: the pid alone


def _foreign(folder: str, names: Names) -> str | None:
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
            if d == folder and not names(n):
                return rel
    return None


def _own_entry(path: str, kind, not_kind: str) -> str | None:
    """Why `path` is not this user's entry of the kind a sweep judges (`LIVE`: gone, or another
    user's, theirs to remove), or None."""
    try:
        st = os.lstat(path)
    except OSError:
        return LIVE  # gone already
    if not kind(st.st_mode):
        return not_kind
    return LIVE if st.st_uid != os.geteuid() else None


def judge(path: str, names: Names, pid: int | None = None) -> str | None:
    """None when `path` is provably a dead packtool run's temporary folder; `EMPTY` when it is
    an empty one without a marker whose name's `pid` is gone (killed between its mkdir and
    its marker, or between its marker's removal and its rmdir); else why it stays (`LIVE` for
    a running run's)."""
    why = _own_entry(path, stat.S_ISDIR, "not a folder packtool made (a link or a file)")
    if why is not None:
        return why
    rec = _marker(path)
    if rec is None and pid is not None and _empty(path):
        return LIVE if _pid_alive(pid) else EMPTY
    why = _dead_run(rec, "no packtool marker in it")
    if why is not None:
        return why
    bad = _foreign(path, names)
    return f"it holds {bad}, which packtool does not write there" if bad else None


def judge_file(path: str) -> str | None:
    """None when `path` is provably a dead packtool run's temporary file (`mark_file`); else
    why it stays (`LIVE` for a running run's)."""
    why = _own_entry(path, stat.S_ISREG, "not a file packtool made (a link, a folder or a special file)")
    if why is not None:
        return why
    return _dead_run(_file_record(path), "it carries no packtool record")


def _dead_run(rec: dict | None, unmarked: str) -> str | None:
    """None when `rec` names a process of this machine, boot and PID namespace that is gone."""
    if rec is None:
        return f"{unmarked} (made by an older packtool, or not by packtool)"
    if not plausible_pid(rec.get("pid")):
        return "its packtool record names a pid no process can have (damaged, or not packtool's)"
    here = _machine()
    if any(rec.get(k) != here[k] for k in here):
        return (f"made on host {rec.get('host')!r} (another machine, boot or container): packtool "
                f"cannot tell whether that run still lives")
    return LIVE if _alive(rec["pid"], str(rec.get("start", ""))) else None


def remove_tree(path: str) -> None:
    """Remove a folder packtool made (its own temporary, or one judged a dead run's); links
    inside are removed as links, never followed. The marker goes last, then the folder: a kill
    mid-removal leaves a marked folder or an empty one, both a later sweep's to remove."""
    if os.path.islink(path):
        return
    try:
        entries = os.listdir(path)
    except OSError:
        return
    removal.remove_written([os.path.join(path, e) for e in entries if e != MARKER], path)
    unmark(path)
    try:
        os.rmdir(path)
    except OSError:
        pass


class Sweep:
    """One run's sweep of leftovers, folders (`consider`) or single temporary files
    (`consider_file`): removes what `judge` / `judge_file` prove packtool's, keeps the rest,
    and says both by name (`report`)."""

    def __init__(self, what: str = "folder") -> None:
        self.what = what  # "folder" or "file": what the notes call the entries
        self.removed: list[str] = []
        self.left: list[tuple[str, str]] = []

    def consider(self, path: str, names: Names, act: Callable[[str], bool] | None = None,
                 pid: int | None = None) -> bool:
        """`act(path)` (default: remove the folder) once proven; True when it removed it.
        `pid`: the one in its name, for an empty folder without a marker (`judge`)."""
        why = judge(path, names, pid)
        if why == EMPTY:
            return self._settle(path, None, _remove_empty)
        return self._settle(path, why, act or _remove_folder)

    def consider_file(self, path: str) -> bool:
        return self._settle(path, judge_file(path), _remove_file)

    def _settle(self, path: str, why: str | None, act: Callable[[str], bool]) -> bool:
        if why is None:
            if act(path):
                self.removed.append(path)
                return True
            return False
        if why != LIVE:
            self.left.append((path, why))
        return False

    def report(self) -> int:
        what, rm = f"temporary {self.what}", "rm -r" if self.what == "folder" else "rm"
        if self.removed:
            note(f"removed {len(self.removed)} {what}(s) left by packtool runs that were "
                 f"killed: {_listed(self.removed)}")
        for path, why in self.left[:SHOWN]:
            note(f"left {path}: its name looks like a packtool {what}'s, but {why}; if it is not yours "
                 f"(an output packed under that name, say) and no packtool run is using it, remove it by "
                 f"hand ({rm} {shlex.quote(path)})")
        if len(self.left) > SHOWN:
            note(f"left {len(self.left) - SHOWN} more such {self.what}(s) packtool cannot prove it made: "
                 f"{_listed([p for p, _ in self.left[SHOWN:]])}")
        return len(self.removed)


def _remove_folder(path: str) -> bool:
    remove_tree(path)
    return True


def _remove_empty(path: str) -> bool:
    try:
        os.rmdir(path)  # never rmtree: whatever appeared in it since the look stays
    except OSError:
        return False
    return True


def _remove_file(path: str) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def _listed(paths: list[str]) -> str:
    more = len(paths) - SHOWN
    return ", ".join(paths[:SHOWN]) + (f" and {more} more" if more > 0 else "")


__all__ = ["EMPTY", "LIVE", "MARKER", "XATTR", "Sweep", "drop_dead_record", "has_marker", "judge", "judge_file",
           "made_here", "mark", "mark_file", "owned_temp_dir", "remove_tree", "unmark", "unmark_file"]
