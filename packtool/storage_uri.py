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
from urllib.parse import urlsplit

from packtool.errors import PacktoolInputError, arg, cli_flag

_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
# what pyarrow.fs.FileSystem.from_uri resolves in this build (gs/az need Arrow built with them)
SCHEMES = ("s3", "gs", "gcs", "abfs", "abfss", "az", "hdfs", "viewfs", "file", "local", "mock")
BUCKETED = ("s3", "gs", "gcs", "abfs", "abfss", "az")  # a URI of these names its bucket (container) first
_SECRET_QUERY = re.compile(r"(key|secret|token|password|passwd|credential|sig|sas)", re.I)
GLOB_CHARS = "*?["


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
    host = u.hostname or ""
    if u.port:
        host += f":{u.port}"
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
