"""Which entries of an existing output folder are packtool's to replace or delete: its
manifest, and the shards it lists whose name follows the naming rule and whose size and
checksum are the manifest's. A hand-edited manifest naming a user's file does not make it
packtool's."""
from __future__ import annotations

import os

from packtool.errors import PacktoolOutputError, arg, cli_flag
from packtool.notes import note
from packtool.output.leftovers import MARKER, has_marker, unmark
from packtool.slabs.format import FormatError, read_manifest, shard_names
from packtool.slabs.names import LEGACY_MANIFEST, MANIFEST, is_shard_name, manifest_file
from packtool.tokenize.checksum import CHECKSUMS, file_digest

_MANIFESTS = (MANIFEST, LEGACY_MANIFEST)
SHOWN_FOREIGN = 3


def say(line: str) -> None:
    """One notice line for the user (packtool.notes: stderr, and --json's notes)."""
    note(line)


def owned_names(output: str, hashed: bool = True) -> list[str]:
    """The entries of an existing output folder packtool may replace: its manifest and the
    shards it lists whose name follows the naming rule and whose size (and, `hashed`, checksum)
    is the manifest's. Anything else there makes it not packtool's to replace."""
    try:
        entries = sorted(os.listdir(output))
    except OSError as e:
        raise PacktoolOutputError(f"cannot list it ({e.strerror})", path=output) from None
    if not entries:
        return []
    try:
        m = read_manifest(output)
        listed = shard_names(m, manifest_file(output) or output)
    except FormatError:
        return _refuse_foreign(output, entries, "it is not a packtool output (no readable manifest)")
    records = {n: e for n, e in zip(listed, m["shards"])}
    mine = {e for e in entries if e in _MANIFESTS or (e in records and _is_our_shard(output, e, records[e], hashed))}
    if MARKER in entries and has_marker(output):
        mine.add(MARKER)  # a swap killed before it took its marker out (output.folder.swap_into_place)
    foreign = [e for e in entries if e not in mine]
    if foreign:
        return _refuse_foreign(output, foreign, "a packtool output, but it also holds")
    return [e for e in entries if e in mine]


def _is_our_shard(folder: str, name: str, record: dict, hashed: bool) -> bool:
    """A listed shard is packtool's only when it looks like one it writes: the naming rule,
    a plain file, the recorded size and checksum (a hand-edited manifest naming a user's
    file does not make it packtool's)."""
    path = os.path.join(folder, name)
    if not is_shard_name(name) or os.path.islink(path) or not os.path.isfile(path):
        return False
    if record.get("bytes") != os.path.getsize(path):
        return False
    if not hashed:
        return True
    alg = next((a for a in CHECKSUMS if isinstance(record.get(a), str)), None)
    return alg is not None and file_digest(path, alg) == record[alg]


def _refuse_foreign(output: str, foreign: list[str], why: str) -> list[str]:
    shown = ", ".join(foreign[:SHOWN_FOREIGN]) + (f" and {len(foreign) - SHOWN_FOREIGN} more"
                                                  if len(foreign) > SHOWN_FOREIGN else "")
    raise PacktoolOutputError(f"{why}: {shown} (not packtool's: no shard name, or not the size "
                              f"and checksum its manifest records); packtool writes only into a "
                              f"new or empty folder or its own previous output: pick another "
                              f"{arg('output')}", path=output, flag=cli_flag("output"))


def remove_previous(old: str, quiet: bool = False, names: list[str] | None = None) -> int:
    """Delete a replaced output: only its manifest and the shards that are packtool's
    (`owned_names`), then the folder if that left it empty (anything else is kept, and said)."""
    if names is None:
        try:
            names = owned_names(old, hashed=False)
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


__all__ = ["owned_names", "remove_previous", "say"]
