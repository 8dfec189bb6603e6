"""The pack lock file (packtool.output's base half; files.py is the one import point).

This module owns the one file packtool opens without a temporary: `.<output>.packtool.lock`,
held with flock for a whole pack (output.folder). It is created exclusively, or an existing one
reopened without following a link and only when it is provably packtool's: a plain one-link
file of this user holding the line packtool writes there (`lock_text`: a pid alone, or nothing,
is what a user's file of that name may hold, so neither is proof). Anything else is refused in
one line naming it, never truncated nor removed; an empty file another run holds the flock on is
that run's lock between its create and its write (the caller's flock then says who).

`take` / `holding` hold such a lock for a whole run on any path a run checks at its start and
writes later (`pack -o`, `train --save`, `train --json-log`; `holding_file` for a single file:
`plan -o`, `inspect --html`): two runs that both found the path free at start would otherwise
both write it (a checkpoint saved over another's, two runs' lines interleaved in one log, a
plan or report replaced by the other run's, both exit 0). The lock names the command holding
it, for the run refused.
"""
from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

from packtool.errors import PacktoolError, PacktoolOutputError, arg, place_error
from packtool.output.writes import NEW_FILE_MODE, make_parents, no_room, remove_created, room_fix

# \Z: `\n$` would take a second newline; the command is absent in a lock of an older packtool
_LOCK_TEXT = re.compile(rb"^packtool lock, pid (\d+)(?:, ([a-z]+))?\n\Z")
_MAX = 64  # longer than any lock_text: what a reopen reads


def lock_text(pid: int | None = None, command: str | None = None) -> bytes:
    """What packtool writes into its lock file once it holds the flock: the proof it is ours,
    and the command holding it (`pack`, `train`) for the message of a run it refuses."""
    said = f", {command}" if command else ""
    return f"packtool lock, pid {os.getpid() if pid is None else pid}{said}\n".encode()


def lock_owner(fd: int) -> str:
    """The pid a held lock names, for the message of the run that waits ("?" while unwritten)."""
    m = _LOCK_TEXT.match(os.pread(fd, _MAX, 0))
    return m.group(1).decode() if m else "?"


def _owner_command(fd: int) -> str | None:
    m = _LOCK_TEXT.match(os.pread(fd, _MAX, 0))
    return m.group(2).decode() if m and m.group(2) else None


def open_lock(path: str, shown: str, flag: str = "output") -> int:
    """The lock file at `path`, opened for flock: created exclusively, or an existing one
    reopened without following a link and only when it is packtool's (a plain file of this user,
    one link, holding `lock_text`) or another run holds it. Anything else is refused, never
    truncated."""
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        return os.open(path, flags | os.O_CREAT | os.O_EXCL, NEW_FILE_MODE)
    except FileExistsError:
        pass
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:  # its run ended between the two opens
        return open_lock(path, shown, flag)
    except OSError as e:
        why = "a symbolic link" if e.errno == errno.ELOOP else f"not openable ({e.strerror})"
        raise PacktoolOutputError(f"the lock file {path} is {why}; packtool never writes "
                                  f"through it: remove it or pick another {arg(flag)}", path=shown, flag=arg(flag)) from None
    st = os.fstat(fd)
    plain = stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_uid == os.geteuid()
    ours = plain and st.st_size <= _MAX and (_LOCK_TEXT.match(os.pread(fd, _MAX, 0)) or _held(fd))
    if not ours:
        os.close(fd)
        # packtool of an earlier version left its lock empty when the disk was full (S49A-8)
        empty = " (an empty one may be left by an older packtool that could not write it on a full disk)" \
            if plain and st.st_size == 0 else ""
        raise PacktoolOutputError(f"{path} is not a packtool lock file (another file, another "
                                  f"user's, or a second name of one){empty}; packtool never writes nor removes it: "
                                  f"move it away or pick another {arg(flag)}", path=shown, flag=arg(flag))
    return fd


def _held(fd: int) -> bool:
    """Whether another open file holds the flock on `fd`'s file: a run that created the lock
    and has not yet written `lock_text`. A user's file is held by no one."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        return e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


def lock_file(target: str) -> str:
    """The lock of the resolved path `target`: `.<name>.packtool.lock` beside it."""
    return os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.packtool.lock")


@dataclass
class Held:
    fd: int
    lock_path: str
    count: int = 1
    made: list[str] = field(default_factory=list)  # parent folders this run created


def take(target: str, shown: str, flag: str, command: str, what: str) -> Held:
    """Hold the lock of the resolved path `target` (`shown`: as the user typed it) for this
    process, or refuse at once in one line naming `flag` and the run (`command`, pid) that
    holds it. `what`: the path's kind in that line (output, checkpoint folder, log)."""
    path = lock_file(target)
    made: list[str] = []
    try:
        made = make_parents(os.path.dirname(path))
        fd = open_lock(path, shown, flag)
    except OSError as e:
        remove_created(made)
        raise _cannot_lock(e, os.path.dirname(path), shown, flag) from None
    except BaseException:
        remove_created(made)
        raise
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            os.close(fd)
            raise
        try:
            owner, by = lock_owner(fd), _owner_command(fd) or command
        finally:
            os.close(fd)
        remove_created(made)
        raise PacktoolOutputError(f"another packtool {by} (pid {owner}) is writing this {what}; "
                                  f"wait for it to finish or pick another {arg(flag)}",
                                  path=shown, flag=arg(flag)) from None
    try:
        same = os.lstat(path).st_ino == os.fstat(fd).st_ino  # not unlinked by a finishing run
    except FileNotFoundError:
        same = False
    if not same:
        os.close(fd)
        return take(target, shown, flag, command, what)
    text = lock_text(command=command)
    try:
        os.ftruncate(fd, 0)  # ours: open_lock refused anything but a packtool lock file
        if os.pwrite(fd, text, 0) != len(text):  # the proof a later run reopens it on
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # only room stops a regular file's write short
    except OSError as e:
        # left unfilled, every later run would refuse it as a user's file (S49A-8): we hold it, it goes
        unlink_if_same(path, fd)
        os.close(fd)
        remove_created(made)
        raise _cannot_lock(e, path, shown, flag) from None
    return Held(fd, path, 1, made)


def _cannot_lock(e: OSError, where: str, shown: str, flag: str) -> PacktoolError:
    """The one line for a lock file (or its folder, `where`) the system would not write: for
    room, what ran out and the fix; `--json` kind by `flag` (output, or the cache's)."""
    room, cls = no_room(e), place_error(flag)
    if room is None:
        return cls(f"cannot be written: {e.strerror or e} ({where}); pick another {arg(flag)}",
                   path=shown, flag=arg(flag))
    return cls(f"its lock file cannot be written ({where}): {room}; {room_fix(e, arg(flag))}",
               path=shown, flag=arg(flag))


def release(h: Held, failed: bool) -> None:
    """Give the lock up (its file removed); `failed`: the parents `take` made go too, if empty."""
    unlink_if_same(h.lock_path, h.fd)  # while still locked: a waiting run re-checks the inode
    os.close(h.fd)
    if failed:
        remove_created(h.made)


@contextmanager
def holding(target: str, shown: str, flag: str, command: str, what: str) -> Iterator[Held]:
    """`take` for the block, released at its end (parents it made removed if the block failed)."""
    h = take(target, shown, flag, command, what)
    failed = True
    try:
        yield h
        failed = False
    finally:
        release(h, failed)


_FILES: dict[str, Held] = {}  # single files this process holds: its library writer inside its CLI run
_FILES_LOCK = threading.Lock()


@contextmanager
def holding_file(check: Callable[[], str], shown: str, flag: str, command: str, what: str) -> Iterator[str]:
    """Hold a single-file output for the block: `check()` (the caller's rules for the path,
    returning it resolved), its lock taken (`take`), and `check()` again, since a run that ended
    between the two may have published the file. Yields the resolved path. Re-entrant within a
    process: the library writer a CLI run calls holds nothing twice (a second flock of its own
    would refuse the run itself)."""
    target = check()
    with _FILES_LOCK:
        mine = _FILES.get(target)
        if mine is not None:
            mine.count += 1
    if mine is not None:
        try:
            yield check()
        finally:
            with _FILES_LOCK:
                mine.count -= 1
        return
    with holding(target, shown, flag, command, what) as h:
        with _FILES_LOCK:
            _FILES[target] = h
        try:
            yield check()
        finally:
            with _FILES_LOCK:
                _FILES.pop(target, None)


def unlink_if_same(path: str, fd: int) -> None:
    """Remove `path` only while it still names the open file `fd`."""
    try:
        if os.lstat(path).st_ino == os.fstat(fd).st_ino:
            os.unlink(path)
    except OSError:
        pass


__all__ = ["Held", "holding", "holding_file", "lock_file", "lock_owner", "lock_text", "open_lock", "release", "take", "unlink_if_same"]


def lock_holder(target: str) -> str | None:
    """"pack, pid N" of the packtool lock beside the resolved path `target`, read without taking
    it (a reader must never make a starting writer fail); None when there is none or it is not
    packtool's."""
    try:
        fd = os.open(lock_file(target), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        m = _LOCK_TEXT.match(os.pread(fd, _MAX, 0))
    finally:
        os.close(fd)
    return None if m is None else f"{m.group(2).decode() + ', ' if m.group(2) else ''}pid {m.group(1).decode()}"
