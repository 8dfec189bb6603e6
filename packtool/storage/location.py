"""Where data lives: a local path or an object-store URI, resolved once, and every touch of it.

`locate(spec)` turns what a user gave (a local path, `s3://bucket/key`, `gs://...`,
`abfs://...`, `hdfs://...`, `file://...`, or a path beside a `pyarrow.fs.FileSystem` / fsspec
filesystem object) into a `Location`: a `pyarrow.fs` filesystem plus a path in it, and a
`shown` form that is safe to print. Readers and writers ask the Location to open, list,
stat, write and delete; packtool's local output rules (lock file, overwrite, clean-up) stay in
`packtool.output`, the object-store commit protocol in `packtool.output.store`, both over this.

Credentials and endpoints come only from each store's standard chain (for S3: AWS_* variables
including AWS_ENDPOINT_URL, profiles, instance roles), never from the URI: a URI carrying a
user:secret@ or a key/secret/token query parameter is refused (`uri.check_form`), and nothing
here prints more than `shown` (scheme, bucket and key). A store that cannot be reached is
`failures.unreached`'s line; this module makes the requests.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import pyarrow.fs as pafs

from packtool.errors import PacktoolError, arg, cli_flag
from packtool.storage.failures import _why, argument_for, unreached
from packtool.storage.uri import _URI, BUCKETED, StorageError, check_form, is_uri, shown, store_error


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
            raise unreached(e, self.shown, self.argument) or store_error(self.argument)(f"cannot delete it ({_why(e)})", path=self.shown) from None
        return True

    def _call(self, what: str, fn, *args, **kw):
        try:
            return fn(*args, **kw)
        except FileNotFoundError:
            raise
        except OSError as e:
            if what != "write" and _not_found(e):
                raise FileNotFoundError(self.shown) from None
            raise unreached(e, self.shown, self.argument) or store_error(self.argument)(f"cannot {what} it ({_why(e)}); check the store's credentials "
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
        from packtool.params import local_uri_path  # one reading of a local URI (a host part refused)
        path = local_uri_path(spec, name, store_error(name))
        return Location(pafs.LocalFileSystem(), path, path, True)
    name = name or argument_for(spec)  # a later request of a reader's output (failures.reading)
    check_form(spec, name)
    try:
        fs, path = pafs.FileSystem.from_uri(spec)
    except (OSError, ValueError, ImportError) as e:  # (S3 asks the bucket's region here when the URI has none)
        raise unreached(e, spec, name) or store_error(name)(f"cannot open the store ({_why(e)}); this pyarrow may lack {scheme} "
                           f"support, or the store's configuration is incomplete", path=shown(spec),
                           flag=name and cli_flag(name)) from None
    return Location(fs, path.rstrip("/"), shown(spec).rstrip("/"), False, name)


def bucket_gone(spec: str, later: bool = True, name: str | None = None) -> PacktoolError | None:
    """For an object found missing (`later`: after its output's manifest was read): its bucket
    deleted, said naming the argument that gave it (failures.reading), else None."""
    if not is_uri(spec) or spec.split("://", 1)[0].lower() not in BUCKETED:
        return None
    loc = locate(spec, name=name)
    bucket = loc.path.split("/", 1)[0]
    if not bucket or loc.info_of(bucket).type != pafs.FileType.NotFound:
        return None
    name = loc.argument
    lead = f"{arg(name)} names an output whose" if name else "its"
    when = "no longer exists (deleted after the manifest was read)" if later else "does not exist"
    return store_error(name)(f"{lead} bucket {bucket} {when}; "
                             f"give an output that exists, or re-run `packtool pack`", path=loc.shown,
                             flag=name and cli_flag(name))



def as_arrow_fs(filesystem) -> pafs.FileSystem:
    if isinstance(filesystem, pafs.FileSystem):
        return filesystem
    mod = type(filesystem).__module__ or ""
    if mod.startswith("fsspec") or hasattr(filesystem, "protocol") and hasattr(filesystem, "open"):
        return pafs.PyFileSystem(pafs.FSSpecHandler(filesystem))
    raise StorageError(f"a {type(filesystem).__name__} is not a filesystem; pass a pyarrow.fs.FileSystem "
                       f"or an fsspec filesystem")


__all__ = ["Location", "as_arrow_fs", "bucket_gone", "locate"]
