"""What `verify` says of files at an output that its manifest does not list and a plain Parquet
reader would read (`pq.read_table`, `pyarrow.dataset`, `datasets`: every name not starting
with `.` or `_`).

Shards an object-store run's intent names (FORMAT.md, "Object storage") are never read through
the manifest, so no consumer refuses them (`slabs.check`, FORMAT.md's standalone reader). While
a run holds the prefix's lease they are that run's, in flight: a note. With no live lease they
are a dead run's, and plain readers of the prefix read them as slabs until a pack removes them
(never, where the intent holds no proof of them): `shard_extra`, as any stray is.
"""
from __future__ import annotations

from packtool.slabs.names import LEGACY_MANIFEST, MANIFEST, in_flight, stray_entries
from packtool.storage import run_holds
from packtool.verification.problems import ProblemLog

PLAIN = ("pq.read_table, pyarrow.dataset and datasets' parquet loader read every file whose name does not "
         "start with '.' or '_'")


def check_unlisted(directory: str, listed: list[str], legacy: bool, log: ProblemLog, notes: list[str]) -> None:
    flying = in_flight(directory)
    strays = stray_entries(directory, listed)
    runs = flying & set(strays)
    if runs and run_holds(directory):
        notes.append(f"{len(runs)} shard(s) named by the intent of the packtool run writing to {directory} "
                     f"(writing, or deleting what it replaced): not part of this output, never read through the "
                     f"manifest (a plain Parquet reader of the prefix meets them until that run ends)")
        runs = set()
    elif runs:  # listed again after the lease read: a run that ended meanwhile deleted its shards first
        runs &= set(stray_entries(directory, listed))
    for f in strays:
        if f in runs:
            log.add("shard_extra", f"{f} is in {directory}, named by the intent of a packtool run that is no "
                    f"longer running (killed; no live lease) and not listed in the manifest: {PLAIN}, so they "
                    f"read it as slabs; the next `packtool pack --overwrite` to it removes it where that intent "
                    f"holds its size and checksum, else move it out", shard=f)
        elif f in flying:
            continue
        elif legacy and f == LEGACY_MANIFEST:
            notes.append(f"{LEGACY_MANIFEST} is an older packtool's manifest name: packtool reads it, "
                         f"but pq.read_table/pyarrow.dataset/datasets read it as a shard and fail; "
                         f"rename it to {MANIFEST} (or re-pack) for a plain Parquet dataset")
        else:
            log.add("shard_extra", f"{f} is in {directory} but not listed in the manifest (a stray or "
                    f"duplicated file: {PLAIN})", shard=f)
