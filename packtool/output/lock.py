"""The pack lock file (packtool.output's base half; files.py is the one import point).

This module owns the one file packtool opens without a temporary: `.<output>.packtool.lock`,
held with flock for a whole pack (output.folder). It is created exclusively, or an existing one
reopened without following a link and only when it is what packtool writes there (a plain
one-link file of this user holding a pid); anything else is refused, never truncated.
"""
from __future__ import annotations

import errno
import os
import re
import stat

from packtool.errors import PacktoolOutputError, arg
from packtool.output.writes import NEW_FILE_MODE

_PID_TEXT = re.compile(rb"^\d*\n?$")


def open_lock(path: str, shown: str, flag: str = "output") -> int:
    """The lock file at `path`, opened for flock: created exclusively, or an existing one
    reopened without following a link and only when it is what packtool writes there (a plain
    file of this user, one link, holding a pid). Anything else is refused, never truncated."""
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
    ours = (stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_uid == os.geteuid()
            and st.st_size <= 32 and _PID_TEXT.match(os.pread(fd, 32, 0) or b""))
    if not ours:
        os.close(fd)
        raise PacktoolOutputError(f"{path} is not a packtool lock file (another file, another "
                                  f"user's, or a second name of one); packtool never writes it: "
                                  f"remove it or pick another {arg(flag)}", path=shown, flag=arg(flag))
    return fd


def unlink_if_same(path: str, fd: int) -> None:
    """Remove `path` only while it still names the open file `fd`."""
    try:
        if os.lstat(path).st_ino == os.fstat(fd).st_ino:
            os.unlink(path)
    except OSError:
        pass


__all__ = ["open_lock", "unlink_if_same"]
