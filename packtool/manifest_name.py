"""The manifest's file name, and so how a folder is known for a packed output: the one rule
that stages below the slab format need too (the tokenize stage refuses a cache root inside a
packed output, tokenize.cache_root). `slabs.names` owns every other name of the format and
re-exports these; import them from there above the tokenize stage.

The manifest is `.manifest.json`, written last: its presence means the output is whole
(docs/DESIGN.md, "The slab format"). Outputs written before the rename carry `manifest.json`;
every reader still takes them (`manifest_file`), nothing writes that name again.
"""
from __future__ import annotations

import os

from packtool.storage import is_uri, locate

MANIFEST = ".manifest.json"
LEGACY_MANIFEST = "manifest.json"  # read, never written (same schema version)


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


__all__ = ["LEGACY_MANIFEST", "MANIFEST", "manifest_file"]
