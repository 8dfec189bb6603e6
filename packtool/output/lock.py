"""The pack lock file (packtool.output's base half; files.py is the one import point).

This module owns the one file packtool opens without a temporary: `.<output>.packtool.lock`,
held with flock for a whole pack (output.folder). It is created exclusively, or an existing one
reopened without following a link and only when it is provably packtool's: a plain one-link
file of this user holding the line packtool writes there (`lock_text`: a pid alone, or nothing,
is what a user's file of that name may hold, so neither is proof). Anything else is refused in
one line naming it, never truncated nor removed; an empty file another run holds the flock on is
that run's lock between its create and its write (the caller's flock then says who).
"""
from __future__ import annotations

import errno
import fcntl
import os
import re
import stat

from packtool.errors import PacktoolOutputError, arg
from packtool.output.writes import NEW_FILE_MODE

_LOCK_TEXT = re.compile(rb"^packtool lock, pid (\d+)\n\Z")  # \Z: `\n$` would take a second newline
_MAX = 64  # longer than any lock_text: what a reopen reads


def lock_text(pid: int | None = None) -> bytes:
    """What packtool writes into its lock file once it holds the flock: the proof it is ours."""
    return f"packtool lock, pid {os.getpid() if pid is None else pid}\n".encode()


def lock_owner(fd: int) -> str:
    """The pid a held lock names, for the message of the run that waits ("?" while unwritten)."""
    m = _LOCK_TEXT.match(os.pread(fd, _MAX, 0))
    return m.group(1).decode() if m else "?"


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
        raise PacktoolOutputError(f"{path} is not a packtool lock file (another file, another "
                                  f"user's, or a second name of one); packtool never writes nor removes it: "
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


def unlink_if_same(path: str, fd: int) -> None:
    """Remove `path` only while it still names the open file `fd`."""
    try:
        if os.lstat(path).st_ino == os.fstat(fd).st_ino:
            os.unlink(path)
    except OSError:
        pass


__all__ = ["lock_owner", "lock_text", "open_lock", "unlink_if_same"]
