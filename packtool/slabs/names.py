"""The names of a packed output's files and where they sit: the shard naming rule, the
manifest's name (and the older one still read), paths inside a folder or an object-store
prefix, and what else a folder holds (names plain Parquet readers skip, strays they would
read, shards an object-store run has in flight). Part of the slab format (`slabs.format`,
which re-exports what FORMAT.md and DESIGN.md name there); nothing else spells these names.

The manifest is `.manifest.json`, written last: its presence means the output is whole
(docs/DESIGN.md, "The slab format"). The leading dot keeps the folder a plain Parquet
dataset: Arrow's readers skip names starting with `.` or `_`, `datasets`' file resolver skips
only `.` (it would read `_manifest.json` as a shard). Outputs written before the rename carry
`manifest.json`; every reader here still takes them (`manifest_file`), nothing writes that
name again.
"""
from __future__ import annotations

import json
import os
import re

from packtool.storage import is_uri, locate

MANIFEST = ".manifest.json"
LEGACY_MANIFEST = "manifest.json"  # read, never written (same schema version)
# an object-store run's intent (output/store.py): the shards it names are in flight, not strays
PENDING_PREFIX = ".packtool-pending-"
_SHARD_NAME = re.compile(r"^slabs-\d{5,}\.parquet$")
# an object-store run writing beside an earlier output adds its 12-hex run id (output/store.py)
_RUN_SHARD_NAME = re.compile(r"^slabs-[0-9a-f]{12}-\d{5,}\.parquet$")
SHARD_FORMS = "slabs-NNNNN.parquet or slabs-RUN-NNNNN.parquet"


def shard_file(k: int) -> str:
    """The name of shard `k`: the naming rule every engine writes by."""
    return f"slabs-{k:05d}.parquet"


def is_shard_name(name: str) -> bool:
    """Whether `name` follows the shard naming rule (what `--overwrite` may delete)."""
    return bool(_SHARD_NAME.match(name))


def is_output_shard_name(name: str) -> bool:
    """Whether a manifest may list `name` as a shard: a name packtool writes (the rule, or an
    object-store run's), so that every plain Parquet reader of the folder and the documented
    `*.parquet` globs read exactly the shards packtool's readers do."""
    return bool(_SHARD_NAME.match(name) or _RUN_SHARD_NAME.match(name))


def manifest_file(directory: str) -> str | None:
    """The manifest's path in `directory` (a folder or an object-store prefix URI):
    `MANIFEST`, else the older `LEGACY_MANIFEST`; None when there is neither."""
    if is_uri(directory):
        loc = locate(directory)
        for name in (MANIFEST, LEGACY_MANIFEST):
            if loc.join(name).is_file():
                return loc.join(name).shown
        return None
    for name in (MANIFEST, LEGACY_MANIFEST):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            return path
    return None


def join(directory: str, name: str) -> str:
    """`name` inside a folder or an object-store prefix URI."""
    return directory.rstrip("/") + "/" + name if is_uri(directory) else os.path.join(directory, name)


def open_file(path: str):
    """What pyarrow.parquet takes for a shard: a local path as it is, a URI as an Arrow file
    opened through packtool.storage (ranged reads; the store's standard credentials)."""
    return locate(path).open_input() if is_uri(path) else path


def is_hidden(name: str) -> bool:
    """A name every plain Parquet reader of the folder skips (Arrow: `.` and `_`)."""
    return name.startswith((".", "_"))


def stray_entries(directory: str, shards: list[str]) -> list[str]:
    """Names in `directory` that are neither a listed shard nor hidden: `pq.read_table(dir)`,
    `pyarrow.dataset` and `datasets.load_dataset("parquet", data_dir=dir)` would read them as
    data. An older output's `manifest.json` is one of them."""
    listed = set(shards)
    names = locate(directory).names() if is_uri(directory) else os.listdir(directory)
    return sorted(n for n in names if n not in listed and not is_hidden(n))


def in_flight(directory: str) -> set[str]:
    """Shards an object-store pack has named in its intent (FORMAT.md, "Object storage"): the
    new ones of a run before its commit, the replaced ones it deletes after it, or a dead
    run's that the next run deletes. Not in the manifest, so never read; not damage."""
    if not is_uri(directory):
        return set()
    loc, names = locate(directory), set()
    for n in loc.names():
        if n.startswith(PENDING_PREFIX):
            try:
                rec = json.loads(loc.join(n).read_bytes())
            except (FileNotFoundError, ValueError):
                continue
            if isinstance(rec, dict):
                names.update(x for k in ("new", "old") for x in rec.get(k) or [] if isinstance(x, str))
    return names
