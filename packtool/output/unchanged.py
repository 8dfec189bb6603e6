"""An output replaced while verify or inspect reads it (S41-2): each reads the manifest first
and the shards later, so a `pack --overwrite` of the same folder finishing in between made good
shards look "truncated" or "edited" against the old manifest (or an old manifest's verdict or
report stand for the new folder). The folder's and manifest's identity (device, inode, size,
mtime) is taken before and compared after; a change is one line saying the output was replaced
under the command, by whom when a packtool run's lock names it (output.lock), and to run it
again, never a problem list or a report. Base, beside the lock: verification and inspection,
sibling stages, both ask it, on any error of their read (a shard gone is the swap, not damage),
and so does the slab readers' manifest on an error reading its shards (S45B-3). On an object
store (S45A-13) the state is the manifest's bytes (a later pack commits by replacing it in one
put; an object's mtime is in whole seconds); a store that does not answer gives no state, so its
own error (packtool.storage's: the endpoint, a deleted bucket) is what is said. The slab readers' store
check is slabs/check_said.py's (it reads the manifest again only when a shard fails)."""
from __future__ import annotations

import hashlib
import os

from packtool.errors import PacktoolInputError
from packtool.manifest_name import manifest_file
from packtool.output.lock import lock_holder
from packtool.storage import is_uri


def folder_state(directory) -> tuple | None:
    """What changes when the folder (or store prefix) or its manifest is replaced; None: no
    path, or a store that does not answer."""
    if not isinstance(directory, (str, os.PathLike)):
        return None
    if is_uri(str(directory)):
        return _store_state(str(directory))
    try:
        d = os.stat(directory)
        m = manifest_file(str(directory))
        s = os.stat(m) if m else None
    except OSError:
        return ("gone",)
    return (d.st_dev, d.st_ino, m, s and (s.st_ino, s.st_size, s.st_mtime_ns))


def _store_state(uri: str) -> tuple | None:
    from packtool.storage import open_bytes
    try:
        m = manifest_file(uri)
        if m is None:  # a deleted bucket or prefix, no later pack's commit: the store's error says it
            return None
        h = hashlib.sha256()
        with open_bytes(m) as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return (m, h.hexdigest())
    except Exception:  # the endpoint, the bucket, the credentials: the store's own error says it
        return None


def check_unchanged(directory, before: tuple | None, command: str | None = "verify") -> None:
    """Raise when the folder is no longer the one `before` described. `command`: what read it
    (None: a reader of the slabs, the Megatron dataset or packtool.hf, opened anew to read on)."""
    now = None if before is None else folder_state(directory)
    if now is None or now == before:
        return
    who = None if is_uri(str(directory)) else lock_holder(os.path.realpath(directory))
    by = f"another packtool run ({who}) " if who else "another run "
    what, again = (f"{command} read it", f"run {command} again") if command else ("it was read", "open it again")
    # the path leads the line (the error's own): not named a second time in the message
    raise PacktoolInputError(f"the output changed while {what} ({by}replaced or rewrote it); nothing read "
                             f"stands for either output: {again} once that run has finished", path=str(directory))
