"""The one import point of packtool.output's base half: every write path's primitives.

Callers in any stage import from here; each rule has one owner module:
  paths.py   where packtool may write, decided before any work: resolving a path once, what a
             file target, an input or a folder packtool writes into may be, and the name of a
             file's temporary
  writes.py  how it writes: a file through an exclusive temporary published by one link or
             rename, a log appended to, temporary folders, parent folders a failed run removes
  lock.py    the pack lock file, never opened through a link nor truncated unless packtool's
docs/DESIGN.md ("Who writes where") is the prose.
"""
from __future__ import annotations

from packtool.output.lock import lock_owner, lock_text, open_lock, unlink_if_same
from packtool.output.paths import (
    SPILL_TAG,
    TMP_TAG,
    check_log_file,
    check_new_file,
    describe_kind,
    is_mount_point,
    kind_name,
    nearest_existing,
    refuse_foreign_files,
    refuse_special_input,
    refuse_stdout,
    refuse_uri,
    refused,
    resolve,
    resolve_folder,
    temp_name,
    temp_target,
)
from packtool.output.writes import (
    NEW_FILE_MODE,
    cannot_write,
    make_parents,
    make_temp_dir,
    no_room,
    open_append,
    open_exclusive,
    publish,
    remove_created,
    room_fix,
    share_as_mkdir,
    sweep_temps,
    write_file,
)

__all__ = ["NEW_FILE_MODE", "SPILL_TAG", "TMP_TAG", "cannot_write", "check_log_file", "check_new_file", "describe_kind", "is_mount_point",
           "kind_name", "lock_owner", "lock_text", "make_parents", "make_temp_dir", "nearest_existing", "no_room",
           "open_append", "open_exclusive", "open_lock", "publish", "refuse_foreign_files", "refuse_special_input",
           "refuse_stdout", "refuse_uri", "refused", "remove_created", "resolve", "room_fix", "resolve_folder", "share_as_mkdir", "sweep_temps", "temp_name", "temp_target",
           "unlink_if_same", "write_file"]
