"""packtool.storage: where data lives, a local path or an object-store location, and every
request packtool makes of it. The face: import from here (`from packtool.storage import locate`);
names load their module on first use, so what a URI's text alone says (`is_uri`, `shown`,
`check_form`: the CLI's flag checks, a path's printing) loads no pyarrow.

One module per rule it owns:
  uri          a location's text: `is_uri`, `shown` (safe to print), `join_uri`, `check_form`
               (what a URI's text alone refuses), `StorageError` (a refusal of a location; of one
               -o / --cache-dir named, StorageOutputError / StorageCacheError: `store_error`,
               all of them `STORE_ERRORS`)
  failures     a store's failure in one line (`unreached`: no answer, another region, a bucket
               gone) and the argument behind later requests (`reading`, `store_failure`)
  location     `locate` a path or URI once into a `Location` (a `pyarrow.fs` filesystem and a
               path) that opens, lists, stats, writes and deletes; `bucket_gone`
  probe        `check_uri`: an argument's store checked before any work (a probe put if written)
  paths        the readers' one call for a string that may be a path or a URI (open, stat, ranges)
  small_files  `read_small`: every file read whole, its size bound checked before the read; a
               Git LFS pointer in place of a file refused as one (`refuse_lfs_pointer`)
  globs        `expand`: an object-store input spec (object, prefix, glob) as its objects;
               `prefix_of`: a prefix above a listed object, its URI spelled as the object's
  local_walk   `local_glob`: a local glob's matches (a folder input is `DIR/**/*`), each real folder
               walked once (a link back to a folder walked, or to one holding it, not followed);
               `outermost`: a glob's matches less those below a folder it matched (read through it)
  conditional  S3's conditional puts and deletes (If-None-Match / If-Match), through botocore
  lease        one writer per object-store prefix: the lease object `PREFIX/.packtool.lock`
The object-store commit protocol over these is `packtool.output.store`'s.
"""
import importlib

_MODULES = {
    "uri": ("BUCKETED", "GLOB_CHARS", "QUERY_KEYS", "SCHEMES", "STORE_ERRORS", "StorageCacheError", "StorageError",
            "StorageOutputError", "check_form", "is_uri", "join_uri", "shown", "store_error"),
    "failures": ("argument_for", "reading", "store_failure", "unreached"),
    "location": ("Location", "as_arrow_fs", "bucket_gone", "locate"),
    "probe": ("PROBE_TAG", "check_uri", "sweep_probes"),
    "paths": ("READ_BLOCK", "arrow_file", "arrow_input", "file_size", "file_stat", "is_file", "object_version", "open_bytes",
              "read_range", "utf8_path"),
    "small_files": ("SETTINGS_BYTES", "kind_name", "mib", "read_small", "refuse_lfs_pointer"),
    "globs": ("expand", "prefix_of"),
    "local_walk": ("local_glob", "outermost"),
    "conditional": ("ABSENT", "client_for", "delete_if", "drop_markers", "etag", "no_new_marker", "put_if"),
    "lease": ("LEASE", "LEASE_SECONDS", "RENEW_SECONDS", "Lease", "LeaseLostError", "LeaseTicket", "expired",
              "run_holds", "take_lease"),
}
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'packtool.storage' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"packtool.storage.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
