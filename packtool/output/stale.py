"""What dead runs left, removed by the next run (packtool.output's stage half, with folder.py):
temporary and spill folders beside an output, a previous output set aside mid-swap (put
back), and the cache's build, set-aside and `verify --source` folders. Only names packtool
gives, only of processes that are gone."""
from __future__ import annotations

import os
import re
import shutil

from packtool.output.files import SPILL_TAG, TMP_TAG, pid_alive, resolve_folder
from packtool.output.owned import remove_previous, say
from packtool.slabs.names import manifest_file


def _stale_pattern(out: str) -> re.Pattern:
    name = re.escape(os.path.basename(out))
    return re.compile(rf"^\.{name}\.(?:{TMP_TAG}|{SPILL_TAG})-(\d+)(?:-[^/]*?)?(\.old)?$")


def clean_stale(output: str, cache_root: str | None = None) -> int:
    """Remove what dead runs left: temporary/spill folders named by packtool for `output`, and
    cache build folders in `cache_root`, whose owner process is gone. A previous output that a
    kill left set aside mid-swap is put back. Says what it did in one line; returns the count."""
    out = resolve_folder(output)
    parent = os.path.dirname(out)
    pat, removed, restored = _stale_pattern(out), 0, False
    try:
        entries = os.listdir(parent)
    except OSError:
        entries = []
    for e in sorted(entries):
        m = pat.match(e)
        if not m or pid_alive(int(m.group(1))):
            continue
        path = os.path.join(parent, e)
        if m.group(2):  # `.old`: the previous output, set aside by a swap that did not finish
            if not os.path.lexists(out) and manifest_file(path):
                os.replace(path, out)
                restored = True
                continue
            removed += remove_previous(path, quiet=True)
            continue
        _remove_tree(path)
        removed += 1
    removed += clean_cache(cache_root) + clean_system_temp()
    if restored:
        say(f"restored {output}: a run killed while replacing it had set it aside")
    if removed:
        say(f"removed {removed} temporary folder(s) left by packtool runs that were killed "
            f"(beside {output}, in the cache or in the system's temp folder)")
    return removed


# output.store.staging_dir and output.folder.spill_dir without an output folder: the system's
# temp folder, since an object-store output has no folder beside it
_SYSTEM_TMP = re.compile(r"^packtool-[a-z]+-(\d+)-")


def clean_system_temp() -> int:
    """Remove the staging and spill folders of this user's dead runs from the system's temp
    folder (a store output's shards were staged there: GBs per killed run)."""
    import tempfile
    root, n = tempfile.gettempdir(), 0
    try:
        entries = os.listdir(root)
    except OSError:
        return 0
    for e in entries:
        m = _SYSTEM_TMP.match(e)
        if not m or pid_alive(int(m.group(1))):
            continue
        path = os.path.join(root, e)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if st.st_uid == os.getuid():  # another user's folder is theirs to remove
            _remove_tree(path)
            n += 1
    return n


def _remove_tree(path: str) -> None:
    """A folder packtool named (temporary, spill, cache build); a link of that name is removed
    as a link, never followed."""
    if os.path.islink(path) or not os.path.isdir(path):
        try:
            os.unlink(path)
        except OSError:
            pass
        return
    shutil.rmtree(path, ignore_errors=True)


_CACHE_TMP = re.compile(r"^\.tmp-[0-9a-f]+-(\d+)-")
_CACHE_ASIDE = re.compile(r"^[0-9a-f]+\.damaged-(\d+)$")  # tokenize.request.discard_cache
_VERIFY_TMP = re.compile(r"^\.verify-source-(\d+)-")  # verification.run.source_store
_PULL_TMP = re.compile(r"^\.pull-[0-9a-f]*-(\d+)-")  # tokenize.store_cache: an entry being pulled
_FLAT_TMP = re.compile(r"^flat\.tmp-(\d+)")  # tokenize.flat_tokens.build_flat_tokens


def clean_cache(root: str | None) -> int:
    if not root or not os.path.isdir(root):
        return 0
    n = 0
    for e in os.listdir(root):
        path = os.path.join(root, e)
        m = _CACHE_TMP.match(e) or _CACHE_ASIDE.match(e) or _VERIFY_TMP.match(e) or _PULL_TMP.match(e)
        if m and not pid_alive(int(m.group(1))):
            _remove_tree(path)
            n += 1
            continue
        if os.path.isdir(path) and not os.path.islink(path) and not e.startswith("."):
            try:
                inner = os.listdir(path)
            except OSError:
                continue
            for f in inner:
                m = _FLAT_TMP.match(f)
                if m and not pid_alive(int(m.group(1))):
                    _remove_tree(os.path.join(path, f))
                    n += 1
    return n


__all__ = ["clean_cache", "clean_stale", "clean_system_temp"]
