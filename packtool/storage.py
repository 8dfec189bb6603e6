"""Where data lives: a local path or an object-store URI, resolved once, and every touch of it.

`locate(spec)` turns what a user gave (a local path, `s3://bucket/key`, `gs://...`,
`abfs://...`, `hdfs://...`, `file://...`, or a path beside a `pyarrow.fs.FileSystem` / fsspec
filesystem object) into a `Location`: a `pyarrow.fs` filesystem plus a path in it, and a
`shown` form that is safe to print. Readers and writers ask the Location to open, list,
stat, write and delete; packtool's local output rules (lock file, overwrite, clean-up) stay in
`packtool.output`, the object-store commit protocol in `packtool.output.store`, both over this.

`check_uri` is the one check of a URI an argument gives, before any work (its text, its
bucket, a probe put for a place written); cli.store_flags applies it to every path flag.

Credentials and endpoints come only from each store's standard chain (for S3: AWS_* variables
including AWS_ENDPOINT_URL, profiles, instance roles), never from the URI: a URI carrying a
user:secret@ or a key/secret/token query parameter is refused, and nothing here prints more
than `shown` (scheme, bucket and key). Scheme names Arrow does not know are one-line refusals.
What a URI's text alone says (those refusals, `shown`, `join_uri`, glob patterns) is
`packtool.storage_uri`'s, re-exported here; this module makes the requests.
"""
from __future__ import annotations

import os
from contextlib import nullcontext
from dataclasses import dataclass
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from packtool.errors import PacktoolInputError, arg, cli_flag
from packtool.storage_uri import (_URI, BUCKETED, GLOB_CHARS, SCHEMES, StorageError, _why,
                                  argument_for, check_form, is_uri, join_uri, reading, shown, store_failure,
                                  unreached)


@dataclass(frozen=True, eq=False)
class Location:
    """A place data lives: `fs` + `path` (Arrow's form: `bucket/key` on object stores, an
    absolute path locally). `shown` names it in messages and manifests."""

    fs: pafs.FileSystem
    path: str
    shown: str
    local: bool
    argument: str | None = None  # the argument that gave it: an unreachable store's line names it

    # --- naming
    def join(self, *names: str) -> "Location":
        path = "/".join([self.path.rstrip("/"), *names]) if not self.local else os.path.join(self.path, *names)
        return Location(self.fs, path, "/".join([self.shown.rstrip("/"), *names]), self.local, self.argument)

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    # --- questions
    def info(self) -> pafs.FileInfo:
        return self._call("stat", self.fs.get_file_info, self.path)

    def info_of(self, path: str) -> pafs.FileInfo:
        """Another path of this store (its bucket), asked as this location's requests are."""
        return self._call("stat", self.fs.get_file_info, path)

    def exists(self) -> bool:
        return self.info().type != pafs.FileType.NotFound

    def is_file(self) -> bool:
        return self.info().type == pafs.FileType.File

    def is_dir(self) -> bool:
        """A folder, or on an object store a prefix holding at least one object."""
        t = self.info().type
        if t == pafs.FileType.Directory:
            return True
        if t == pafs.FileType.File or self.local:
            return False
        return bool(self.list(recursive=False))

    def list(self, recursive: bool = True) -> list[pafs.FileInfo]:
        """Files below this folder/prefix (empty when there is none), sorted by path."""
        sel = pafs.FileSelector(self.path.rstrip("/") or "/", allow_not_found=True, recursive=recursive)
        found = self._call("list", self.fs.get_file_info, sel)
        return sorted((i for i in found if i.type == pafs.FileType.File), key=lambda i: i.path)

    def names(self) -> list[str]:
        """The plain names directly in this folder/prefix."""
        return [i.path.rsplit("/", 1)[-1] for i in self.list(recursive=False)]

    def entries(self) -> list[str]:
        """Every name directly in this folder/prefix, sub-prefixes too (os.listdir's): a plain
        Parquet reader of the prefix reads the objects below them as well."""
        sel = pafs.FileSelector(self.path.rstrip("/") or "/", allow_not_found=True, recursive=False)
        found = self._call("list", self.fs.get_file_info, sel)
        return sorted(i.path.rstrip("/").rsplit("/", 1)[-1] for i in found if i.type != pafs.FileType.NotFound)

    # --- bytes
    def open_input(self):
        """A seekable Arrow file (Parquet, Arrow IPC, ranged reads on object stores)."""
        return self._call("open", self.fs.open_input_file, self.path)

    def open_stream(self):
        """A sequential Arrow stream (no decompression: the readers pick codecs by suffix)."""
        return self._call("open", self.fs.open_input_stream, self.path, compression=None)

    def read_bytes(self, limit: int | None = None) -> bytes:
        """`limit`: read at most one byte past it, so a caller can refuse an object over its
        bound (a manifest, an intent) without holding it whole."""
        with self.open_stream() as f:
            return f.read() if limit is None else f.read(limit + 1)

    def open_output(self):
        """A new object/file written whole: an object store makes it visible only at close
        (large ones go up as multipart uploads)."""
        if self.local:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
        # compression=None: Arrow would otherwise gzip a `.gz` name a second time
        return self._call("write", self.fs.open_output_stream, self.path, compression=None)

    def write_bytes(self, data: bytes) -> None:
        with self.open_output() as f:
            f.write(data)

    def delete(self) -> bool:
        """Remove this one file/object; False when it was already gone."""
        try:
            self.fs.delete_file(self.path)
        except FileNotFoundError:
            return False
        except OSError as e:
            if "not found" in str(e).lower() or "nosuchkey" in str(e).lower():
                return False
            raise unreached(e, self.shown, self.argument) or StorageError(f"cannot delete it ({_why(e)})", path=self.shown) from None
        return True

    def _call(self, what: str, fn, *args, **kw):
        try:
            return fn(*args, **kw)
        except FileNotFoundError:
            raise
        except OSError as e:
            if what != "write" and _not_found(e):
                raise FileNotFoundError(self.shown) from None
            raise unreached(e, self.shown, self.argument) or StorageError(f"cannot {what} it ({_why(e)}); check the store's credentials "
                               f"chain and endpoint (for S3: AWS_* variables, AWS_ENDPOINT_URL)",
                               path=self.shown) from None


def _not_found(e: OSError) -> bool:
    t = str(e).lower()
    return any(w in t for w in ("not found", "nosuchkey", "no such", "does not exist", "path does not exist"))


def locate(spec, filesystem=None, name: str | None = None) -> Location:
    """Resolve a path or URI once. `filesystem`: a `pyarrow.fs.FileSystem` or an fsspec
    filesystem object (a library user's own store); `spec` is then a path in it. `name`: the
    argument that gave `spec`, named (as its flag on the command line) by a refusal."""
    if filesystem is not None:
        fs = as_arrow_fs(filesystem)
        path = os.fspath(spec)
        return Location(fs, path, f"<{type(filesystem).__name__}>/{path.lstrip('/')}",
                        isinstance(fs, pafs.LocalFileSystem))
    spec = os.fspath(spec)
    m = _URI.match(spec)
    if not m:
        from packtool.params import expanded  # the one rule for `~` (an empty HOME refused)
        path = os.path.abspath(expanded(spec, name))
        return Location(pafs.LocalFileSystem(), path, spec, True)
    scheme = m.group(1).lower()
    if scheme in ("file", "local"):
        path = urlsplit(spec).path
        return Location(pafs.LocalFileSystem(), path, path, True)
    name = name or argument_for(spec)  # a later request of a reader's output (storage_uri.reading)
    check_form(spec, name)
    try:
        fs, path = pafs.FileSystem.from_uri(spec)
    except (OSError, ValueError, ImportError) as e:  # (S3 asks the bucket's region here when the URI has none)
        raise unreached(e, spec, name) or StorageError(f"cannot open the store ({_why(e)}); this pyarrow may lack {scheme} "
                           f"support, or the store's configuration is incomplete", path=shown(spec),
                           flag=name and cli_flag(name)) from None
    return Location(fs, path.rstrip("/"), shown(spec).rstrip("/"), False, name)


def bucket_gone(spec: str, later: bool = True, name: str | None = None) -> StorageError | None:
    """For an object found missing (`later`: after its output's manifest was read): its bucket
    deleted, said naming the argument that gave it (storage_uri.reading), else None."""
    if not is_uri(spec) or spec.split("://", 1)[0].lower() not in BUCKETED:
        return None
    loc = locate(spec, name=name)
    bucket = loc.path.split("/", 1)[0]
    if not bucket or loc.info_of(bucket).type != pafs.FileType.NotFound:
        return None
    name = loc.argument
    lead = f"{arg(name)} names an output whose" if name else "its"
    when = "no longer exists (deleted after the manifest was read)" if later else "does not exist"
    return StorageError(f"{lead} bucket {bucket} {when}; "
                        f"give an output that exists, or re-run `packtool pack`", path=loc.shown,
                        flag=name and cli_flag(name))


PROBE_TAG = ".packtool-probe"
_TAKES: set[str] = set()  # store prefixes this process saw take an object (check_uri's probe)


def check_uri(spec: str, name: str, write: bool = False, around_probe=None) -> Location:
    """The one check of a store URI that argument `name` (its flag on the command line) gives,
    before any work: its form (locate: a known scheme, no credentials, a bucket named); a
    bucket that does not exist; and, `write`, that the prefix takes an object (a probe put and
    deleted, once per prefix and process): a missing bucket, no write permission or another
    endpoint is said here, not after the inputs are tokenized (`around_probe(loc)`: a context
    the probe runs in, store_conditional.no_new_marker's, given by the caller since that module
    is built on this one). A store that answers the
    bucket question with anything but "not found" (a role allowed objects, not the bucket) is
    left to the work's own requests."""
    loc = locate(spec, name=name)
    flag, bucket = cli_flag(name), loc.path.split("/", 1)[0]
    if loc.local or loc.shown in _TAKES:
        return loc
    try:  # a bucket store's first name only: on HDFS it is a folder an --output may create
        missing = bool(bucket) and spec.split("://", 1)[0].lower() in BUCKETED and \
            loc.fs.get_file_info(bucket).type == pafs.FileType.NotFound
    except OSError as e:  # a store that answers otherwise is left to the work's requests; one that does not is said
        if (err := unreached(e, spec, name)) is not None:
            raise err from None
        missing = False
    if missing:
        raise StorageError(f"its bucket {bucket} does not exist (or this endpoint has no such bucket); create "
                           f"it, or give {arg(name)} a prefix in an existing bucket", path=loc.shown, flag=flag)
    if write:
        probe = loc.join(f"{PROBE_TAG}-{os.getpid()}-{os.urandom(4).hex()}")
        with around_probe(loc) if around_probe else nullcontext():  # its delete's `PREFIX/` marker
            try:
                with loc.fs.open_output_stream(probe.path, compression=None):
                    pass  # an empty object: put at close
            except OSError as e:
                raise unreached(e, spec, name) or StorageError(f"cannot be written ({_why(e)}); check the store's credentials chain and endpoint "
                                   f"(for S3: AWS_* variables, AWS_ENDPOINT_URL), or give another {arg(name)}",
                                   path=loc.shown, flag=flag) from None
            try:
                probe.delete()
            except StorageError:
                pass  # a role that may put but not delete: the prefix takes objects, which is the question
        _TAKES.add(loc.shown)
    return loc


def as_arrow_fs(filesystem) -> pafs.FileSystem:
    if isinstance(filesystem, pafs.FileSystem):
        return filesystem
    mod = type(filesystem).__module__ or ""
    if mod.startswith("fsspec") or hasattr(filesystem, "protocol") and hasattr(filesystem, "open"):
        return pafs.PyFileSystem(pafs.FSSpecHandler(filesystem))
    raise StorageError(f"a {type(filesystem).__name__} is not a filesystem; pass a pyarrow.fs.FileSystem "
                       f"or an fsspec filesystem")


# --- the same questions of a string that may be a local path or a URI (readers' one call) ---

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


__all__ = ["BUCKETED", "PROBE_TAG", "check_form", "check_uri", "READ_BLOCK", "arrow_file", "join_uri", "read_range", "file_size", "file_stat", "is_file", "open_bytes", "GLOB_CHARS", "Location", "SCHEMES", "StorageError", "as_arrow_fs", "is_uri",
           "locate", "shown", "bucket_gone", "reading", "store_failure", "argument_for"]


# What is small by nature is read whole, bounded (tokenize.json_depth's docstring says why);
# here, below every stage, so a reader's manifest read loads no numba.
# Settings files (tokenizer_config.json, state.json, a chat template): the largest real ones
# (added_tokens_decoder of a 200k vocabulary) are a few MB.
SETTINGS_BYTES = 64 << 20


def mib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.1f} MiB"


def _read_bounded(f, size: int, limit: int) -> bytes:
    """At most limit + 1 bytes of `f` (`size`: what its stat says). Read in steps: read(n)
    allocates n bytes up front, and the bound is 256 MiB for a tokenizer.json; a FIFO, a /proc
    file (size 0) or a file that grows still stops past the bound."""
    parts, n, want = [], 0, size + 1 if size else 1 << 16
    while n <= limit:
        b = f.read(min(want, limit + 1 - n))
        if not b:
            break
        parts.append(b)
        n, want = n + len(b), 1 << 16
    return b"".join(parts)


def kind_name(mode: int) -> str:
    """A file's kind in words, from its st_mode: the one wording (output.paths re-exports it)."""
    import stat
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def _open_regular(local: str, shown_path: str, what: str, err, where: dict):
    """`local` opened for reading if it is a regular file (followed through links). Opened
    non-blocking first: a FIFO with no writer would block open() itself forever, and a device
    (/dev/zero) has no size to bound, so both are refused by kind, not read. A folder keeps
    open()'s IsADirectoryError (the caller's own message)."""
    import stat
    fd = os.open(local, os.O_RDONLY | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            return open(local, "rb")  # open()'s own IsADirectoryError, which the callers name
        if not stat.S_ISREG(mode):
            raise err(f"is {kind_name(mode)}, not a regular file: a {what} is read whole, and packtool "
                      f"never reads a pipe or device as one; give the {what} itself (a saved copy)",
                      **({"path": shown_path} | where))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_small(path: "str | Location", limit: int, what: str, fix: str, err=PacktoolInputError, **where) -> bytes:
    """The bytes of `path`, a `what` file, refused (`err`, `where`: its path/flag) over `limit`
    bytes before any is read; the bounded read also stops a file that grows; a FIFO or device is refused by kind. Every
    file packtool reads whole that is small by nature comes through here, local or (a URI, a
    Location) on a store. A missing file is the caller's FileNotFoundError."""
    local = path
    if isinstance(path, Location) or is_uri(path):
        loc = path if isinstance(path, Location) else locate(path)
        path, local = loc.shown, loc.path if loc.local else None
    if local is None:  # an object store holds no FIFOs or devices
        with loc.open_input() as f:  # the size from opening it: nothing is read past the bound
            size = f.size()
            data = _read_bounded(f, size, limit) if size <= limit else b""
    else:
        with _open_regular(local, path, what, err, where) as f:
            size = os.fstat(f.fileno()).st_size
            data = _read_bounded(f, size, limit) if size <= limit else b""
    if size > limit or len(data) > limit:
        raise err(f"is {mib(max(size, len(data)))}, over the {mib(limit)} any {what} takes: not a {what} "
                  f"(a damaged or copied-over file?); {fix}", **({"path": path} | where))
    return data
