"""A folder below a folder input or a `**` glob that could not be listed (storage.local_walk's
`unlisted`): refused naming it, its files' rows would be left out without a word (RA-4) — except
a filesystem's own lost+found at its mount point (ext2/3/4: root's, mode 0700, where fsck puts
recovered fragments), which lies at the root of every such data disk: `pack /mnt/data` as a user
was refused with fixes no user can take (chmod root's folder, name the disk's every file). It is
no one's data: passed over with a note (RA-9)."""
from __future__ import annotations

import os

from packtool.errors import PacktoolInputError
from packtool.notes import note

FSCK = "lost+found"


def refuse_unlisted(spec: str, unlisted: list, quiet: bool = False, folder: str | None = None) -> None:
    """Refuse the first of `unlisted` ((folder, OSError) pairs: below the input, or the input
    folder itself) that is not a mount's lost+found; note those, unless `quiet` (a second
    resolution of the same inputs). `folder`: the folder the input types (a glob's fixed part;
    default `spec`, a folder input), said as "the input folder", never as below the input."""
    fsck = [w for w, e in unlisted if _fsck_folder(w, e)]
    if fsck and not quiet:
        note(f"{spec}: passed over {', '.join(fsck)}: the filesystem's {FSCK} at its mount point, which only "
             f"root can list (where fsck puts what it recovers), not data")
    left = [(w, e) for w, e in unlisted if w not in fsck]
    if left:
        where, e = left[0]
        more = f" (and {len(left) - 1} more)" if len(left) > 1 else ""
        itself = os.path.abspath(where) == os.path.abspath(spec if folder is None else folder)
        said = "the input folder" if itself else f"folder {where} below the input"
        raise PacktoolInputError(f"{said}{more} cannot be listed ({type(e).__name__}: "
                                 f"{e.strerror or e}): its files' rows would be left out; give packtool read "
                                 f"access to it, or pass the files to read themselves", path=spec)


def _fsck_folder(where: str, e: OSError) -> bool:
    # the parent resolved: a disk is usually named through a link to its mount point (/data ->
    # /mnt/disk1), and ismount never calls a link a mount (RA-11)
    return (isinstance(e, PermissionError) and os.path.basename(os.path.normpath(where)) == FSCK
            and os.path.ismount(os.path.realpath(os.path.dirname(os.path.abspath(where)))))
