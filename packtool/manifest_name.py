"""The manifest's file name and the shard names, and so how a folder is known for a packed
output: the rules that stages below the slab format need too (the tokenize stage refuses a cache root inside a
packed output, tokenize.cache_root). `slabs.names` owns every other name of the format and
re-exports these; import them from there above the tokenize stage.

The manifest is `.manifest.json`, written last: its presence means the output is whole
(docs/DESIGN.md, "The slab format"). Outputs written before the rename carry `manifest.json`:
every reader finds it (`manifest_file`) and, those outputs being schema version 1, refuses them
in its words (slabs.format.OLD_VERSION); --overwrite replaces them; nothing writes that name again.
"""
from __future__ import annotations

import os
import re

from packtool.storage import SETTINGS_BYTES, is_uri, locate, read_small

MANIFEST = ".manifest.json"
LEGACY_MANIFEST = "manifest.json"  # found, never written (outputs of schema version 1 under it)
FORMAT_NAME = "packtool-slabs"  # the manifest's `format` (slabs.format, the format's owner, re-exports it)
_SHARD_NAME = re.compile(r"slabs-(?:(?P<run>[0-9a-f]{12})-)?(?P<k>\d{5,})\.parquet", re.ASCII)
_NAMES_FORMAT = re.compile(rb'"format"\s*:\s*"' + FORMAT_NAME.encode() + rb'"')


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


def manifest_named(directory: str) -> bool:
    """Whether a local `directory` holds a manifest in some form a reader speaks of rather than
    "no manifest": `manifest_file`'s regular file, the current name as anything, the older one
    as a symbolic link (slabs.format._refuse_manifest_kind says which; a folder or FIFO of the
    older name is a data folder's own)."""
    return manifest_file(directory) is not None or os.path.lexists(os.path.join(directory, MANIFEST)) \
        or os.path.islink(os.path.join(directory, LEGACY_MANIFEST))


def packtool_made(directory: str) -> bool:
    """Whether `directory` holds a manifest packtool wrote, for a reader that would pass the
    folder over as packtool's (tokenize.own_trees): only on proof, under either name, since
    `.manifest.json` is another tool's name too (a hidden export or checksum manifest) and
    `manifest.json` datasets': the manifest names this format (read bounded), or a shard name
    packtool writes lies beside it (an older output, a damaged manifest). Anything else is not
    taken for packtool's, so no user's rows are dropped on a file name (S48A-16)."""
    path = manifest_file(directory)
    if path is None:
        return False
    try:  # the listing first, as the store side asks: shards beside it prove most outputs without reading it
        if any(is_shard_name(n) for n in os.listdir(directory)):
            return True
    except OSError:
        pass
    return names_this_format(path)


def is_shard_name(name: str) -> bool:
    """Whether `name` is a shard name packtool writes, in either form: the one rule for what a
    manifest may list (so every plain Parquet reader of the folder and the documented
    `*.parquet` globs read exactly the shards packtool's readers do), what `--overwrite` may
    delete, what a sweep of a dead run's folder takes for packtool's, and the proof that a
    manifest beside such shards is packtool's (`packtool_made`)."""
    return bool(_SHARD_NAME.fullmatch(name))


def names_this_format(path) -> bool:
    """Whether the manifest at `path` (a path, URI or storage Location) names this format."""
    try:
        return _NAMES_FORMAT.search(read_small(path, SETTINGS_BYTES, "manifest", "")) is not None
    except (OSError, ValueError):  # ValueError: over the bound (PacktoolInputError)
        return False


__all__ = ["FORMAT_NAME", "LEGACY_MANIFEST", "MANIFEST", "manifest_file", "manifest_named", "names_this_format",
           "packtool_made"]
