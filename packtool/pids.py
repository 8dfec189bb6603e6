"""A pid read back from something packtool did not just write itself (a store lease's owner, a
marker's record, a temporary folder's name): one a process can have, or the record or name is
not packtool's. Asked before any system call: the system takes a C int, so a larger one ended a
run in a bare OverflowError (S49A-7). Standard library only."""
from __future__ import annotations

# Linux's PID_MAX_LIMIT, the largest pid_max any kernel allows: no process anywhere has a larger pid
PID_MAX = 1 << 22


def plausible_pid(pid: object) -> bool:
    """`pid` is an int a process can have (a bool is not one)."""
    return type(pid) is int and 0 < pid <= PID_MAX


def pid_in_text(text: str) -> int | None:
    """The pid `text` names (a record's or a name's digits) where a process can have it, else None.
    ASCII digits only, at most 7 of them: str.isdigit() admits `²` and `①`, which int() refuses,
    and int() of 4,300+ digits raises; either ended a run reading a damaged or foreign record in a
    bare ValueError (RA-6)."""
    if not (text.isascii() and text.isdigit() and len(text) <= 7):
        return None
    pid = int(text)
    return pid if plausible_pid(pid) else None

