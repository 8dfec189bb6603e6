"""A location's text: what a path-or-URI string names, before any request is made.

`is_uri`, `shown` (a URI safe to print or record: scheme, host and path, no user info, no
query), `join_uri` (names below a URI or path, as text a task on another machine locates
again) and `check_form`: what a URI's text alone says packtool cannot use (a scheme Arrow does
not know, credentials in it, no bucket). `StorageError` is every refusal of a location, here
and in `packtool.storage` (which re-exports all of this), the module that resolves a location
to a `pyarrow.fs` filesystem and makes its requests. Standard library only: the CLI's flag
checks and a path's printing load no pyarrow.
"""
from __future__ import annotations

import os
import re
from urllib.parse import quote, unquote, urlsplit

from packtool.errors import PacktoolInputError, arg, cli_flag

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


class StorageError(PacktoolInputError):
    """A location packtool cannot use: an unknown scheme, credentials in a URI, a store that
    cannot be reached or refuses a request. One line, the location shown without secrets."""


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
    return f"{u.scheme}://{host}{u.path}"


def _refuse_secrets(spec: str, name: str | None = None) -> None:
    u = urlsplit(spec)
    given = f" in {arg(name)}" if name else ""  # the argument (its flag on the command line) that gave it
    if u.username or u.password:
        raise StorageError(f"a URI with user:password@ is refused{given}: credentials come from the store's "
                           "standard chain (for S3: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
                           "AWS_PROFILE, an instance role)", path=shown(spec), flag=name and cli_flag(name))
    for part in u.query.split("&"):
        if part and _SECRET_QUERY.search(part.split("=", 1)[0]):
            raise StorageError(f"the URI query parameter {part.split('=', 1)[0]!r} looks like a "
                               f"credential and is refused{given}: use the store's standard chain",
                               path=shown(spec), flag=name and cli_flag(name))


def check_form(spec: str, name: str | None = None) -> None:
    """What a URI's text alone says packtool cannot use (no request made): a scheme Arrow does not
    know, credentials in it, no bucket. `name`: the argument that gave it, named."""
    scheme, flag = spec.split("://", 1)[0].lower(), name and cli_flag(name)
    if scheme not in SCHEMES:
        raise StorageError(f"the scheme {scheme}:// is not supported{f' in {arg(name)}' if name else ''}; "
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
        e = StorageError(f"names no bucket; give {how}", path=shown(spec), flag=flag)
        e.usage = bool(flag)  # a flag's value the command cannot take
        raise e
    if scheme not in ("file", "local"):  # (those are local paths, read as such by locate)
        _check_text(spec, scheme, name)


def _names(path: str) -> list[str]:
    """The names a URI's path gives the store, decoded (`%2F` splits, `%2e%2e` is `..`); one
    leading and one trailing `/` are no names."""
    body = path[1:-1] if path.endswith("/") else path[1:]
    return [n for p in body.split("/") for n in unquote(p).split("/")] if body else []


def _check_text(spec: str, scheme: str, name: str | None) -> None:
    """A URI whose text Arrow would refuse in its own words, or read as another key than the one
    typed: a character a URI cannot hold unescaped, an empty, `.` or `..` path component (after
    decoding: an object store keeps `s3://bkt/%2e%2e/x` as the key `../x`), an upper-case bucket."""
    u, rest = urlsplit(spec), spec.split("://", 1)[1]
    netloc, path = rest.split("/", 1) if "/" in rest else (rest, "")
    path = "/" + path.split("?", 1)[0] if path or rest.endswith("/") else ""
    host = netloc.rpartition("@")[2]
    names, verb = _names(path), "is"
    if _BAD_ESCAPE.search(path):
        what, why, fixed = "a % that starts no escape", "a % is written %25", _BAD_ESCAPE.sub("%25", path)
    elif not _PATH_CHARS.match(path):
        bad = sorted({repr(c) for c in path if not _PATH_CHARS.match(c)})
        what, why = f"the character{'s' * (len(bad) > 1)} {' '.join(bad)}", "a URI holds it only percent-encoded"
        if len(bad) > 1:
            why, verb = "a URI holds them only percent-encoded", "are"
        fixed = quote(path, safe="/!$&'()*+,;=:@%~")
    elif any(n in ("", ".", "..") for n in names):
        odd = next(n for n in names if n in ("", ".", ".."))
        what = "an empty path component (//)" if not odd else f"a {odd!r} path component (percent-encoded or not)"
        why = "a store keeps it in the key, it names no folder"
        fixed = "/" + "/".join(quote(n, safe="!$&'()*+,;=:@~") for n in names if n not in ("", ".", ".."))
    elif scheme in LOWER_BUCKETS and host != host.lower():
        what, why, fixed, host = "an upper-case bucket name", "bucket names are lower case", path, host.lower()
    else:
        return
    uri = f"{spec.split('://', 1)[0]}://{host}{fixed}" + (f"?{u.query}" if u.query else "")
    how, flag = uri, name and cli_flag(name)
    if name:
        said = arg(name)
        how = f"{said} {uri}" if said.startswith("-") or said.isupper() else f"{said}={uri!r}"
    given = f" in {arg(name)}" if name else ""
    # shown whole but its query (no user info reaches here: _refuse_secrets), a `#...` included
    e = StorageError(f"{what} {verb} refused{given} ({why}); give {how}", path=spec.split("?", 1)[0], flag=flag)
    e.usage = bool(flag)  # a flag's value the command cannot take
    raise e


def _why(e: BaseException) -> str:
    """The store's reason, one line, without anything that could carry a request signature;
    a long one cut at a word, marked so (not mid-word, as if it were the whole text)."""
    text = " ".join(str(e).split())
    text = re.sub(r"(?i)(signature|credential|authorization|x-amz-[a-z-]+)=\S+", r"\1=…", text)
    return text if len(text) <= 240 else text[:240].rsplit(" ", 1)[0] + " …"


def _hidden_below(path: str, base: str) -> bool:
    return any(p.startswith((".", "_")) for p in path[len(base):].strip("/").split("/"))


def _glob_regex(pattern: str) -> re.Pattern:
    """`**` crosses folders, `*` and `?` do not (glob.glob(recursive=True)'s rule)."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and "]" in pattern[i + 2:]:
            j = pattern.index("]", i + 2)
            body = pattern[i + 1:j]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
            i = j
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z")
