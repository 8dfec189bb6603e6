"""A location's text: what a path-or-URI string names, before any request is made.

`is_uri`, `shown` (a URI safe to print or record: scheme, host and path, no user info, no
query), `join_uri` (names below a URI or path, as text a task on another machine locates
again) and `check_form`: what a URI's text alone says packtool cannot use (a scheme Arrow does
not know, credentials in it, no bucket). `StorageError` is every refusal of a location, here
and in the rest of `packtool.storage`. Standard library only (the package's face loads its
modules on first use): the CLI's flag checks and a path's printing load no pyarrow.
"""
from __future__ import annotations

import os
import re
from urllib.parse import quote, unquote, urlsplit

from packtool.errors import PacktoolCacheError, PacktoolError, PacktoolInputError, PacktoolOutputError, arg, argument_kind, cli_flag

_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
# what pyarrow.fs.FileSystem.from_uri resolves in this build (gs/az need Arrow built with them)
SCHEMES = ("s3", "gs", "gcs", "abfs", "abfss", "az", "hdfs", "viewfs", "file", "local", "mock")
BUCKETED = ("s3", "gs", "gcs", "abfs", "abfss", "az")  # a URI of these names its bucket (container) first
_SECRET_QUERY = re.compile(r"(key|secret|token|password|passwd|credential|sig|sas)", re.I)
GLOB_CHARS = "*?["
LOWER_BUCKETS = ("s3", "gs", "gcs")  # their bucket names are lower case: `s3://BKT` names no bucket there is
# what a URI's path holds as typed (RFC 3986 pchar and "/"); a `%` starts an escape. Anything else
# (a space, `#`, `|`, `[`, non-ASCII) Arrow refuses in its own words or, `#`, drops silently
_PATH_CHARS = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:@/%]*\Z")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
# the query keys pyarrow.fs.FileSystem.from_uri takes (Arrow 26; tests/storage/test_uri_text.py
# holds the installed Arrow to them): any other it refuses in its own words, which packtool said
# as "cannot open the store"; checked here, without pyarrow or a request. HDFS hands any key to
# Hadoop's configuration: not checked
_S3_KEYS = ("region", "scheme", "endpoint_override", "allow_bucket_creation", "allow_bucket_deletion",
            "tls_ca_file_path", "tls_verify_certificates", "allow_delayed_open", "smart_defaults")
_GCS_KEYS = ("scheme", "endpoint_override", "retry_limit_seconds", "project_id")
_AZURE_KEYS = ("credential_kind", "tenant_id", "client_id", "client_secret", "dfs_storage_authority",
               "blob_storage_authority", "enable_tls", "background_writes")
QUERY_KEYS = {"s3": _S3_KEYS, "gs": _GCS_KEYS, "gcs": _GCS_KEYS, "abfs": _AZURE_KEYS, "abfss": _AZURE_KEYS}
AZURE = ("abfs", "abfss", "az")  # their user part before `@` is a container or account name, not a credential
_CONTAINER = re.compile(r"(?:[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){2,62}|\$root|\$logs|\$web)\Z")
_CONTAINER_RULE = ("Azure container names are 3-63 lower-case letters, digits and single hyphens, a letter or "
                   "digit at each end")


class StorageError(PacktoolInputError):
    """A location packtool cannot use: an unknown scheme, credentials in a URI, a store that
    cannot be reached or refuses a request. One line, the location shown without secrets. Kind
    `input`: a place packtool reads, or one no argument named (`store_error` gives the class of
    the argument that named it)."""


class StorageOutputError(PacktoolOutputError):
    """A StorageError's refusal of a place packtool writes (-o, `output=`): kind `output`."""


class StorageCacheError(PacktoolCacheError):
    """A StorageError's refusal of the tokenized cache's place (--cache-dir, `cache_dir=`): kind `cache`."""


# every refusal of a location, whichever argument named it (an `except` of them all); not one
# class: an input error is kind `input` everywhere (a wrapper's `except PacktoolInputError` never
# catches an output's)
STORE_ERRORS = (StorageError, StorageOutputError, StorageCacheError)
_BY_KIND = {"output": StorageOutputError, "cache": StorageCacheError}


def store_error(name: str | None) -> type[PacktoolError]:
    """The class of a refusal of a location that argument `name` gave (errors.argument_kind: the
    README's exit table gives it the argument's kind, whatever the store said): the one rule
    every refusal naming its argument asks."""
    return _BY_KIND.get(argument_kind(name), StorageError) if name else StorageError


def is_uri(spec: object) -> bool:
    """A `scheme://` string (a Windows drive `C:\\` is not one)."""
    return isinstance(spec, str) and bool(_URI.match(spec))


def join_uri(spec: str, *names: str) -> str:
    """`spec` (a URI, its query kept at the end) or a local path, with `names` below it: what
    a task on another machine locates again (URIs travel as text, never as a filesystem
    object that could carry resolved credentials)."""
    if not is_uri(spec):
        return os.path.join(spec, *names)
    base, q, query = spec.partition("?")
    return "/".join([base.rstrip("/"), *names]) + q + query


def shown(spec: str) -> str:
    """`spec` safe to print or record: no user info, no query string."""
    if not is_uri(spec):
        return spec
    u = urlsplit(spec)
    host = u.netloc.rpartition("@")[2]  # as typed: `s3://BKT/x` is not shown as s3://bkt/x
    if u.scheme.lower() in AZURE and u.password is None:  # `container@account...`: a name, kept
        host = u.netloc
    return f"{u.scheme}://{host}{u.path}"


def _refuse_secrets(spec: str, name: str | None = None) -> None:
    u = urlsplit(spec)
    given = f" in {arg(name)}" if name else ""  # the argument (its flag on the command line) that gave it
    if u.password or (u.username and u.scheme.lower() not in AZURE):
        raise store_error(name)(f"a URI with user:password@ is refused{given}: credentials come from the store's "
                                "standard chain (for S3: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
                                "AWS_PROFILE, an instance role)", path=shown(spec), flag=name and cli_flag(name))
    for part in u.query.split("&"):
        if part and _SECRET_QUERY.search(part.split("=", 1)[0]):
            raise store_error(name)(f"the URI query parameter {part.split('=', 1)[0]!r} looks like a "
                                    f"credential and is refused{given}: use the store's standard chain",
                                    path=shown(spec), flag=name and cli_flag(name))


def check_form(spec: str, name: str | None = None) -> None:
    """What a URI's text alone says packtool cannot use (no request made): a scheme Arrow does not
    know, credentials in it, no bucket. `name`: the argument that gave it, named."""
    scheme, flag = spec.split("://", 1)[0].lower(), name and cli_flag(name)
    if scheme not in SCHEMES:
        raise store_error(name)(f"the scheme {scheme}:// is not supported{f' in {arg(name)}' if name else ''}; "
                                f"packtool reads and writes local "
                                f"paths and {', '.join(s + '://' for s in ('s3', 'gs', 'abfs', 'hdfs'))} "
                                f"(through pyarrow.fs), or pass a filesystem object from Python",
                                path=shown(spec), flag=flag)
    _refuse_secrets(spec, name)
    if scheme in BUCKETED and not urlsplit(spec).netloc:
        # Arrow would take the key for a bucket (`s3://` lists the account: its bucket `bkt` was
        # shown as `kt/`) or refuse in its own words ("Path cannot start with a separator")
        how, said = f"{scheme}://BUCKET/PREFIX", name and arg(name)
        if said:  # a library argument takes it as a value (`output='s3://...'`), a command line after its name
            how = f"{said} {how}" if said.startswith("-") or said.isupper() else f"{said}={how!r}"
        e = store_error(name)(f"names no bucket; give {how}", path=shown(spec), flag=flag)
        e.usage = bool(flag)  # a flag's value the command cannot take
        raise e
    if scheme not in ("file", "local"):  # (those are local paths, read as such by locate)
        _check_text(spec, scheme, name)


def _names(path: str) -> list[str]:
    """The names a URI's path gives the store, decoded (`%2F` splits, `%2e%2e` is `..`); one
    leading and one trailing `/` are no names."""
    body = path[1:-1] if path.endswith("/") else path[1:]
    return [n for p in body.split("/") for n in unquote(p).split("/")] if body else []


def _path_problem(path: str) -> tuple[str, str, str, str] | None:
    """(what, verb, why, the path to give) for a path Arrow refuses or reads as another key."""
    names = _names(path)
    if _BAD_ESCAPE.search(path):
        return "a % that starts no escape", "is", "a % is written %25", _BAD_ESCAPE.sub("%25", path)
    if not _PATH_CHARS.match(path):
        bad = sorted({repr(c) for c in path if not _PATH_CHARS.match(c)})
        many = len(bad) > 1
        return (f"the character{'s' * many} {' '.join(bad)}", "are" if many else "is",
                f"a URI holds {'them' if many else 'it'} only percent-encoded", quote(path, safe="/!$&'()*+,;=:@%~"))
    if any(n in ("", ".", "..") for n in names):
        odd = next(n for n in names if n in ("", ".", ".."))
        what = "an empty path component (//)" if not odd else f"a {odd!r} path component (percent-encoded or not)"
        return (what, "is", "a store keeps it in the key, it names no folder",
                "/" + "/".join(quote(n, safe="!$&'()*+,;=:@~") for n in _as_a_path_reads(names)))
    return None


def _as_a_path_reads(names: list[str]) -> list[str]:
    """The names a local path would resolve `names` to (`a/../x` is `x`, not `a/x`; a `..` at the
    bucket stays there): the URI to give is where the user meant, never a third place."""
    out: list[str] = []
    for n in names:
        if n == "..":
            out = out[:-1]
        elif n not in ("", "."):
            out.append(n)
    return out


def _azure_container(netloc: str, path: str) -> tuple[str, str] | None:
    """(where, name): where Arrow's AzureFileSystem reads an abfs URI's container (the user part
    before `@`, the host, or the path's first name) and what it is; None where Arrow finds no
    account (it refuses that URI itself)."""
    user, at, hostport = netloc.rpartition("@")
    host = hostport.rpartition(":")[0] if ":" in hostport else hostport
    first = ("path", path.lstrip("/").split("/", 1)[0])
    if host.endswith(".blob.core.windows.net"):
        return first
    if host.endswith(".dfs.core.windows.net"):
        return ("user", user) if at else first
    if not at:
        return None
    return first if "." in host or ":" in hostport else ("host", host)  # an emulator's host, or account@container


def _container_problem(netloc: str, path: str) -> tuple[str, str, str, str] | None:
    """(what, why, the netloc and path to give) for a container name Azure refuses (its rule: 3-63
    lower-case letters, digits and single hyphens, a letter or digit at each end; or $root,
    $logs, $web). Only the case is fixed in the URI given."""
    found = _azure_container(netloc, path)
    if found is None or _CONTAINER.match(found[1]):
        return None
    where, name = found
    if _CONTAINER.match(name.lower()):
        what, why, fixed = "an upper-case container name", "Azure container names are lower case", name.lower()
    else:
        what, why, fixed = f"the container name {name!r}" if name else "no container", _CONTAINER_RULE, "CONTAINER"
    if where == "path":
        return what, why, netloc, "/" + fixed + path.lstrip("/")[len(name):]
    user, at, hostport = netloc.rpartition("@")
    if where == "user":
        return what, why, f"{fixed}@{hostport}", path
    return what, why, f"{user}{at}{fixed}{hostport[len(name):]}", path


def _query_problem(scheme: str, query: str, fragment: str | None) -> tuple[str, str, str, str] | None:
    """(what, verb, why, the query to give) for a query Arrow refuses in its own words (a key its
    filesystem does not take) or reads otherwise than typed (a key given twice: the first is
    taken; a key without a value: ignored, the default used) and for a fragment (dropped)."""
    keys, seen, kept, problem = QUERY_KEYS.get(scheme), set(), [], None
    for part in query.split("&") if query else []:
        key, _, value = part.partition("=")
        said = None
        if keys is not None and unquote(key) not in keys:
            said = f"the query parameter {key!r}", "is", f"{scheme}:// URIs take {', '.join(keys)}"
        elif not value:
            said = f"the query parameter {key!r} without a value", "is", "the store's default is used instead"
        elif unquote(key) in seen:
            said = f"the query parameter {key!r} given twice", "is", "only its first value is used"
        if said is None:
            seen.add(unquote(key))
            kept.append(part)
        problem = problem or said  # the first one named; every one left out of the URI to give
    if problem is None and fragment is not None:
        problem = (f"a fragment ('#{fragment}')", "is", "a store URI has none: it would be dropped; a '#' in a key "
                   "is written %23")
    return None if problem is None else (*problem, "&".join(kept))


def _check_text(spec: str, scheme: str, name: str | None) -> None:
    """A URI whose text Arrow would refuse in its own words, or read as another key or store than
    the one typed: a character a URI cannot hold unescaped, an empty, `.` or `..` path component
    (after decoding: an object store keeps `s3://bkt/%2e%2e/x` as the key `../x`), an upper-case
    bucket, an Azure container name Azure refuses, a query key Arrow does not take, given twice
    or without a value, a fragment after the query."""
    rest, q, query = spec.split("://", 1)[1].partition("?")
    query, hashed, fragment = query.partition("#")
    if q and (not query or any("=" not in part for part in query.split("&"))):
        _refuse_glob_mark(spec, name)
    netloc, path = rest.split("/", 1) if "/" in rest else (rest, "")
    path = "/" + path if path or rest.endswith("/") else ""
    host = netloc.rpartition("@")[2]
    if (found := _path_problem(path)) is not None:
        what, verb, why, path = found
    elif scheme in LOWER_BUCKETS and host != host.lower():
        what, verb, why, netloc = "an upper-case bucket name", "is", "bucket names are lower case", netloc.lower()
    elif scheme in ("abfs", "abfss") and (found := _container_problem(netloc, path)) is not None:
        what, why, netloc, path = found
        verb = "is"
    elif (found := _query_problem(scheme, query, fragment if hashed else None)) is not None:
        what, verb, why, query = found
        q = "?" if query else ""
    else:
        return
    uri = f"{spec.split('://', 1)[0]}://{netloc}{path}{q}{query}"
    how, flag = uri, name and cli_flag(name)
    if name:
        said = arg(name)
        how = f"{said} {uri}" if said.startswith("-") or said.isupper() else f"{said}={uri!r}"
    given = f" in {arg(name)}" if name else ""
    # shown whole but its query (no secret reaches here: _refuse_secrets), a `#...` included
    e = store_error(name)(f"{what} {verb} refused{given} ({why}); give {how}", path=spec.split("?", 1)[0], flag=flag)
    e.usage = bool(flag)  # a flag's value the command cannot take
    raise e


def _refuse_glob_mark(spec: str, name: str | None) -> None:
    """A `?` that starts no key=value query (`s3://b/in?`, `s3://b/i?.jsonl`): a glob character
    on a path, but the start of the query in a URI, so Arrow would read another key (`in`) or
    refuse its own way (S44-2). No URI is guessed for it: the user's meaning is not known."""
    flag = name and cli_flag(name)
    given = f" in {arg(name)}" if name else ""
    e = store_error(name)(f"a '?' that starts no key=value query is refused{given} (in a store URI '?' begins the query, "
                          f"not a glob character): write * to match characters, or %3F for a '?' in a key",
                          path=spec.split("?", 1)[0], flag=flag)
    e.usage = bool(flag)
    raise e


__all__ = ["BUCKETED", "GLOB_CHARS", "QUERY_KEYS", "SCHEMES", "STORE_ERRORS", "StorageCacheError", "StorageError", "StorageOutputError",
           "check_form", "is_uri", "join_uri", "shown", "store_error"]
