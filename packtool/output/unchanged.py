"""An output replaced while verify or inspect reads it (S41-2): each reads the manifest first
and the shards later, so a `pack --overwrite` of the same folder finishing in between made good
shards look "truncated" or "edited" against the old manifest (or an old manifest's verdict or
report stand for the new folder). The folder's and manifest's identity (device, inode, size,
mtime) is taken before and compared after; a change is one line saying the output was replaced
under the command, by whom when a packtool run's lock names it (output.lock), and to run it
again, never a problem list or a report. Base, beside the lock: verification and inspection,
sibling stages, both ask it, on any error of their read (a shard gone is the swap, not damage),
and so does the slab readers' manifest on an error reading its shards (S45B-3). Local folders only: an object store's manifest is replaced in one
put, and a store output's own checks (a deleted bucket, a vanished shard) are storage.py's."""
from __future__ import annotations

import os

from packtool.errors import PacktoolInputError
from packtool.manifest_name import manifest_file
from packtool.output.lock import lock_holder
from packtool.storage_uri import is_uri


def folder_state(directory) -> tuple | None:
    """What changes when the folder or its manifest is replaced; None: not a local folder."""
    if not isinstance(directory, (str, os.PathLike)) or is_uri(str(directory)):
        return None
    try:
        d = os.stat(directory)
        m = manifest_file(str(directory))
        s = os.stat(m) if m else None
    except OSError:
        return ("gone",)
    return (d.st_dev, d.st_ino, m, s and (s.st_ino, s.st_size, s.st_mtime_ns))


def check_unchanged(directory, before: tuple | None, command: str | None = "verify") -> None:
    """Raise when the folder is no longer the one `before` described. `command`: what read it
    (None: a reader of the slabs, the Megatron dataset or packtool.hf, opened anew to read on)."""
    if before is None or folder_state(directory) == before:
        return
    who = lock_holder(os.path.realpath(directory))
    by = f"another packtool run ({who}) " if who else "another run "
    what, again = (f"{command} read it", f"run {command} again") if command else ("it was read", "open it again")
    # the path leads the line (the error's own): not named a second time in the message
    raise PacktoolInputError(f"the output changed while {what} ({by}replaced or rewrote it); nothing read "
                             f"stands for either output: {again} once that run has finished", path=str(directory))
