"""The one rule for removing what a call of packtool wrote (a temporary folder's contents,
output.leftovers.remove_tree; the datasets-cache conversion of a to_hf() call refused, hf.load):
only the paths the caller proves its own, under the folder they were written in; a folder with
what is in it, a link as a link, never followed; nothing reached through a link, and nothing
inside a folder already removed (another writer may have made it there since)."""
from __future__ import annotations

import os
import shutil
from typing import Iterable


def remove_written(paths: Iterable[str], root: str) -> None:
    """Remove `paths`, what this call provably wrote under the folder `root` (the caller's proof:
    names in its marked temporary, names that appeared in a cache during its call). A folder
    goes with what is in it, links inside removed as links; a file or a link is unlinked, never
    followed. A path outside `root`, reached through a link, or inside a folder already removed
    (another writer may have made it since) stays; one gone already is no error."""
    root, gone = os.path.abspath(root), set()
    for p in sorted({os.path.abspath(p) for p in paths}, key=len):  # a folder before what is in it
        if _not_reached(p, root, gone):
            continue
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p, ignore_errors=True)
        else:
            try:
                os.unlink(p)
            except OSError:
                pass
        gone.add(p)


def _not_reached(p: str, root: str, gone: set[str]) -> bool:
    """Whether a folder between `root` and `p` is a link or already removed, or `p` lies outside."""
    up = os.path.dirname(p)
    while up != root:
        if up in gone or os.path.islink(up) or os.path.dirname(up) == up:
            return True
        up = os.path.dirname(up)
    return False


__all__ = ["remove_written"]
