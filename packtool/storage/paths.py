"""The same questions of a string that may be a local path or a URI, each one call for the
readers: an Arrow file to read it through (`arrow_file`, `arrow_input`; a local name that is not
UTF-8 through Python's own open), sequential and ranged reads (`open_bytes`, `read_range`) and
stat (`is_file`, `file_size`, `file_stat`).
"""
from __future__ import annotations

import os

import pyarrow.fs as pafs

from packtool.storage.location import locate
from packtool.storage.uri import is_uri, shown

def utf8_path(path: str) -> bool:
    """Whether pyarrow can take `path` as a string: it encodes one as UTF-8, which a local name
    from another locale (bytes Python holds as surrogate escapes, `p\udcfe.parquet`) is not."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def arrow_input(path: str):
    """A seekable Arrow file to read `path` through: a URI's object, a local file (through
    Python's own open where pyarrow cannot take the name, S44-4)."""
    if is_uri(path):
        return locate(path).open_input()
    import pyarrow as pa
    return pa.OSFile(path, "rb") if utf8_path(path) else pa.PythonFile(open(path, "rb"), mode="r")


def arrow_file(path: str):
    """What pyarrow readers take: a local path as it is, a URI or a local name that is not UTF-8
    as a seekable Arrow file."""
    return path if not is_uri(path) and utf8_path(path) else arrow_input(path)


READ_BLOCK = 8 << 20  # one ranged GET per this many bytes of a sequential read


def open_bytes(path: str):
    """A binary file object for sequential reads (checksums, text inputs) with `tell()`; on a
    store, buffered so that requests stay O(bytes / READ_BLOCK), whatever the reader's step."""
    if not is_uri(path):
        return open(path, "rb")
    import io
    return io.BufferedReader(locate(path).open_input(), READ_BLOCK)


def read_range(path: str, offset: int, nbytes: int) -> bytes:
    """Bytes [offset, offset + nbytes) of a file or object (one ranged GET); fewer at its end."""
    if not is_uri(path):
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(nbytes)
    with locate(path).open_input() as f:
        return f.read_at(nbytes, offset) if nbytes else b""


def is_file(path: str) -> bool:
    return locate(path).is_file() if is_uri(path) else os.path.isfile(path)


def file_size(path: str) -> int:
    if not is_uri(path):
        return os.path.getsize(path)
    info = locate(path).info()
    if info.type == pafs.FileType.NotFound:
        raise FileNotFoundError(shown(path))
    return int(info.size)


def file_stat(path: str) -> tuple[int, int]:
    """(size, mtime in ns; 0 when the store keeps none) of a file or object."""
    if not is_uri(path):
        st = os.stat(path)
        return st.st_size, st.st_mtime_ns
    info = locate(path).info()
    if info.type == pafs.FileType.NotFound:
        raise FileNotFoundError(shown(path))
    return int(info.size), int(info.mtime_ns or 0)


def object_version(path: str) -> tuple:
    """What changes with every put of an object: (size, mtime, ETag). A store's mtime has one-second
    resolution, so an object replaced by another of its size within that second kept (size, mtime)
    and passed as unchanged (S49A-1); the ETag (S3's, as pyarrow's HEAD response gives it) tells.
    A store that gives none is judged by (size, mtime) alone, as before; a local path by its stat."""
    if not is_uri(path):
        return file_stat(path)
    loc = locate(path)
    with loc.open_input() as f:  # a HEAD request: the body is read only by reads
        meta = f.metadata() or {}
    tag = meta.get("ETag") or meta.get("etag") or b""
    return (*file_stat(path), tag.decode(errors="replace") if isinstance(tag, bytes) else str(tag))


__all__ = ["READ_BLOCK", "arrow_file", "arrow_input", "file_size", "file_stat", "is_file", "object_version", "open_bytes",
           "read_range", "utf8_path"]
