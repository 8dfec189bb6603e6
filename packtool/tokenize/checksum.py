"""File checksums, read in blocks. Three jobs:
- identity recorded for people (tokenizer files, the inputs listed in cache.json and the
  manifest): sha256, the usual name for "these exact bytes";
- shard integrity in the manifest (`verify` re-hashes every shard): xxh3-128, several times
  faster than sha256 here (4.0 vs 0.74 GB/s), which matters when hashing is a tenth of a
  pack. Manifests written before it carry `sha256`, and `verify` still checks those;
- what is hashed on every run (each input's content for the cache key, every file of a
  reused cache): xxh3-128 over a read-only mapping (`fast_digest`), no copies, so the
  check costs a few percent of a warm re-pack (bench/cache_check.py)."""
from __future__ import annotations

import hashlib

from packtool.storage import is_uri, object_version, open_bytes

SHARD_CHECKSUM = "xxh3_128"  # the manifest key of a shard's checksum
CHECKSUMS = (SHARD_CHECKSUM, "sha256")  # what `verify` knows, newest first


def _hasher(alg: str):
    if alg == "xxh3_128":
        import xxhash
        return xxhash.xxh3_128()
    if alg == "sha256":
        return hashlib.sha256()
    raise ValueError(f"unknown checksum {alg!r}; known: {', '.join(CHECKSUMS)}")


_BLOCK = 1 << 22


def _blocks(path: str):
    """Every block of a file or object, read into one buffer reused block after block. A fresh
    4 MiB `bytes` per block was carved from a thread's arena and, freed past glibc's trim
    threshold (1 MiB while shards are written: heap.writing_heap), handed back to the system,
    to be faulted in again by the next block: ~1,000 page faults a block, +100-190k minor
    faults and ~0.3 CPU-s in a 1M-row pre-tokenized pack hashing its shards (issue 23's 2%)."""
    buf = bytearray(_BLOCK)
    view = memoryview(buf)
    with (open_bytes(path) if is_uri(path) else open(path, "rb", buffering=0)) as f:
        while n := f.readinto(buf):
            yield view[:n]


def file_digest(path: str, alg: str) -> str:
    h = _hasher(alg)
    for block in _blocks(path):
        h.update(block)
    return h.hexdigest()


# sha256 of objects hashed by fast_digest in this process: an object is downloaded once for
# both (the cache key and cache.json's record), not twice
_OBJECT_SHA256: dict[str, str] = {}


_OBJECT_KEY: dict[str, tuple] = {}


def digest_again(path: str) -> str:
    """`fast_digest` once more, after the file was read: did it change meanwhile? An object is
    not downloaded a third time: a store replaces an object whole, with a new ETag (and mtime),
    so the same version (storage.object_version) as when it was hashed means the same bytes."""
    if is_uri(path) and path in _OBJECT_KEY:
        stat, digest = _OBJECT_KEY[path]
        if object_version(path) == stat:
            return digest
    return fast_digest(path)


def both_digests(path: str) -> tuple[str, str]:
    """(xxh3-128, sha256) of a file or object in one read: the cache key's digest and
    cache.json's record, computed where the bytes are read (the Ray engine's tasks)."""
    import xxhash
    h, sha = xxhash.xxh3_128(), hashlib.sha256()
    for block in _blocks(path):
        h.update(block)
        sha.update(block)
    return h.hexdigest(), sha.hexdigest()


def hashed_version(path: str) -> tuple[str, str, tuple | None]:
    """`both_digests` with the object version it read (None for a local file), for a process that
    rechecks later elsewhere (`changed_since`): the Ray engine hashes and reads in other tasks."""
    version = object_version(path) if is_uri(path) else None
    return (*both_digests(path), version)


def changed_since(path: str, digest: str, version: tuple | None) -> bool:
    """Whether a file or object no longer holds the bytes `hashed_version` read: an object of the
    same version is taken as unchanged (no download); anything else is hashed again."""
    if version is not None and object_version(path) == version:
        return False
    return (both_digests(path)[0] if is_uri(path) else file_digest(path, SHARD_CHECKSUM)) != digest


def sha256_file(path: str) -> str:
    if is_uri(path) and path in _OBJECT_SHA256:
        return _OBJECT_SHA256.pop(path)
    return file_digest(path, "sha256")


def shard_checksum(path: str) -> str:
    return file_digest(path, SHARD_CHECKSUM)


def fast_digest(path: str) -> str:
    """xxh3-128 of a file's bytes, read in blocks into one reused buffer. Not one mapping of
    the whole file: its pages count in RSS while hashed (+~620 MiB peak for a 637 MB input)."""
    if is_uri(path):  # an object: streamed in ranged reads, never whole in memory
        stat = object_version(path)
        digest, _OBJECT_SHA256[path] = both_digests(path)
        _OBJECT_KEY[path] = (stat, digest)
        return digest
    return file_digest(path, SHARD_CHECKSUM)
