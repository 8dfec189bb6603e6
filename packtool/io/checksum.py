"""The one file checksum: sha256 of a file's bytes, read in blocks (tokenizer identity,
input fingerprints, shard checksums in the manifest and in `verify`)."""
from __future__ import annotations

import hashlib


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()
