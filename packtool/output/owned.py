"""Which entries of an existing output are packtool's to replace or delete: its manifest, and
the shards it lists whose name follows the naming rule and whose size and checksum are the
manifest's. A hand-edited manifest naming a user's file does not make it packtool's.
`shard_is_ours` is that rule for every location kind: a local folder's files here, a store
prefix's objects in output.store (S35-15: a store once checked the size alone)."""
from __future__ import annotations

import os
import stat as st

import pyarrow.fs as pafs

from packtool.errors import PacktoolOutputError, arg, cli_flag
from packtool.notes import note
from packtool.output.leftovers import MARKER, has_marker, unmark
from packtool.slabs.format import FormatError, read_manifest, shard_names
from packtool.slabs.names import LEGACY_MANIFEST, MANIFEST, is_shard_name, manifest_file
from packtool.storage import is_uri, join_uri, locate
from packtool.tokenize.checksum import CHECKSUMS, file_digest

_MANIFESTS = (MANIFEST, LEGACY_MANIFEST)
SHOWN_FOREIGN = 3


def say(line: str) -> None:
    """One notice line for the user (packtool.notes: stderr, and --json's notes)."""
    note(line)


def owned_names(output: str) -> list[str]:
    """The entries of an existing output folder packtool may replace: its manifest and the
    shards it lists that `shard_is_ours`. Anything else there makes it not packtool's to
    replace."""
    try:
        entries = sorted(os.listdir(output))
    except OSError as e:
        raise PacktoolOutputError(f"cannot list it ({e.strerror})", path=output) from None
    if not entries:
        return []
    if entries == [MARKER] and has_marker(output):  # a run's marker alone (a kill, a failed swap left it)
        return entries
    linked = [e for e in entries if e in _MANIFESTS and os.path.islink(os.path.join(output, e))]
    if linked:  # the manifest held to the shards' rule (shard_is_ours): a user's link is not packtool's
        return _refuse_foreign(output, linked, "a packtool output, but it also holds")
    try:
        m = read_manifest(output, replacing=True)  # a version 1 output too (its shards prove it)
        listed = shard_names(m, manifest_file(output) or output)
    except FormatError:
        return _refuse_foreign(output, entries, "it is not a packtool output (no readable manifest)")
    records = {n: e for n, e in zip(listed, m["shards"])}
    mine = {e for e in entries if e in _MANIFESTS or (e in records and shard_is_ours(output, e, records[e]))}
    if MARKER in entries and has_marker(output):
        mine.add(MARKER)  # a swap killed before it took its marker out (output.folder.swap_into_place)
    foreign = [e for e in entries if e not in mine]
    if foreign:
        return _refuse_foreign(output, foreign, "a packtool output, but it also holds")
    return [e for e in entries if e in mine]


# path -> ((size, change token), checksum name, value) of a shard whose bytes this process
# hashed: the later checks of one run (after the lock, before the swap or the commit, before a
# delete) read it again only when its size or change token moved. The token must move with any
# rewrite: a file's (mtime, ctime, inode) in ns, an S3 object's ETag. A store's modification
# time has whole seconds (a same-size rewrite within one would pass), so a store without an
# ETag here gets no shortcut: its shards are read at every check.
_PROVEN: dict[str, tuple] = {}


def shard_is_ours(where: str, name: str, record: dict) -> bool:
    """Whether `name` in `where` (a local folder or a store prefix URI, the same rule for both)
    is the shard the manifest `record` describes: the naming rule, a plain file or object (not
    a link), the recorded size and the recorded checksum. Anything less (a hand-edited manifest
    naming a user's file, a shard edited in place to the same size) is not packtool's."""
    path = join_uri(where, name)
    stat = _plain_stat(path) if is_shard_name(name) else None
    alg = next((a for a in CHECKSUMS if isinstance(record.get(a), str)), None)
    if stat is None or alg is None or record.get("bytes") != stat[0]:
        return False
    proof = (stat, alg, record[alg])
    if stat[1] is not None and _PROVEN.get(path) == proof:
        return True
    if file_digest(path, alg) != record[alg]:
        return False
    _PROVEN[path] = proof  # the stat taken before the read: a change while hashing is seen next time
    return True


def _plain_stat(path: str) -> tuple[int, object] | None:
    """(size, change token or None) of a plain file or object, else None (missing, a folder or
    prefix, a link: packtool never writes a shard through one)."""
    if not is_uri(path):
        try:
            s = os.lstat(path)
        except OSError:
            return None
        return (s.st_size, (s.st_mtime_ns, s.st_ctime_ns, s.st_ino)) if st.S_ISREG(s.st_mode) else None
    loc = locate(path)
    head = _s3_head(loc)
    if head is not None:
        return head
    try:
        info = loc.info()
    except FileNotFoundError:
        return None
    return (int(info.size), None) if info.type == pafs.FileType.File else None


def _s3_head(loc) -> tuple[int, str] | None:
    """(size, ETag) of an S3 object in one HEAD request, through botocore when it is installed
    (pyarrow.fs shows no ETag; storage.lease reaches S3 the same way); None elsewhere, or when the
    request fails (the caller then asks pyarrow, which says why)."""
    from packtool.storage import client_for  # the store the URI names, its endpoint included
    client = client_for(loc)
    if client is None:
        return None
    bucket, _, key = loc.path.partition("/")
    try:
        head = client.head_object(Bucket=bucket, Key=key)
    except Exception:  # botocore's errors, whatever the store answered: pyarrow's stat decides
        return None
    return int(head["ContentLength"]), str(head["ETag"])


def _refuse_foreign(output: str, foreign: list[str], why: str) -> list[str]:
    refuse_foreign(output, foreign, why, "folder")


def refuse_foreign(shown: str, foreign: list[str], why: str, place: str):
    """The one refusal of an output that is not packtool's to write, a folder's or a prefix's
    (`place`), naming a few of what is not packtool's."""
    text = ", ".join(foreign[:SHOWN_FOREIGN]) + (f" and {len(foreign) - SHOWN_FOREIGN} more"
                                                 if len(foreign) > SHOWN_FOREIGN else "")
    raise PacktoolOutputError(f"{why}: {text} (not packtool's: no shard name, a symbolic "
                              f"link, or not the size and checksum its manifest records); packtool writes only into a "
                              f"new or empty {place} or its own previous output: pick another "
                              f"{arg('output')}", path=shown, flag=cli_flag("output"))


def remove_previous(old: str, quiet: bool = False, names: list[str] | None = None) -> int:
    """Delete a replaced output: only its manifest and the shards that are packtool's
    (`owned_names`), then the folder if that left it empty (anything else is kept, and said)."""
    if names is None:
        try:
            names = owned_names(old)
        except PacktoolOutputError:
            names = [n for n in _MANIFESTS if os.path.isfile(os.path.join(old, n))]
            names = [] if len(os.listdir(old)) > len(names) else names
    for n in names:
        if n == MARKER:
            continue
        try:
            os.unlink(os.path.join(old, n))
        except FileNotFoundError:
            pass
    # the marker goes last: a kill before it leaves a marked `.old`, after it an empty one (the
    # sweep's rmdir); a set-aside output carries one (folder.swap_into_place)
    unmark(old)
    try:
        os.rmdir(old)
    except OSError:
        if not quiet:
            say(f"kept {old}: it holds files packtool did not write")
        return 0
    return 1


__all__ = ["owned_names", "refuse_foreign", "remove_previous", "say", "shard_is_ours"]
