"""What an `error:` line is about, read from the error contract's form (`<path>[, row N]: ...`):
the flag it opens with and the file or folder it starts with. --json's error object fills its
`flag` and `path` from them for an error raised without them (a ValueError, a usage string).
"""
from __future__ import annotations

import os
import re

_SUBJECT = re.compile(r"^(?:[^:]+?(?:, row \d+)?: )?(--[a-z][a-z0-9-]*|-[A-Za-z])(?=[\s:,=]|$)")
_WHERE = re.compile(r"^(.+?)(?:, row \d+)?: ")


def subject_flag(message: str) -> str | None:
    """The flag a message is about, by the error contract's form: the one it opens with, after
    its `<path>[, row N]: ` (`--workers must be >= 1`, `x.npy: --column ...`)."""
    m = _SUBJECT.match(message)
    return m.group(1) if m else None


def named_path(message: str) -> str | None:
    """The file or folder a message starts with (`<path>[, row N]: ...`, the error contract's
    form), when it reads as one: it exists, or it is one word with a folder or an extension."""
    m = _WHERE.match(message)
    cand = m.group(1) if m else ""
    if not cand or cand.startswith("-"):
        return None
    if os.path.lexists(cand) or "://" in cand:
        return cand
    return cand if " " not in cand and ("/" in cand or re.search(r"\.\w{1,8}$", cand)) else None
