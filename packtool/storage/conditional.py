"""S3's conditional requests (If-None-Match / If-Match on PutObject and DeleteObject), the
fencing of an object-store output's writer (storage.lease, output.store): a put or delete that
takes effect only while the object is what this run last saw, so a run that was paused past
its lease and resumed can neither overwrite the manifest or lease another run put in the
meantime nor delete them. pyarrow.fs has no conditional request, so they go through botocore
when it is installed; elsewhere (another store, or no botocore) each call answers None and
the caller falls back to reading first (a window of one request: FORMAT.md says so)."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from packtool.errors import PacktoolError, place_error
from packtool.storage.failures import unreached
from packtool.storage.location import Location

_CLIENTS: dict = {}
ABSENT = ""  # the ETag to expect of an object that must not exist yet (If-None-Match: *)


def client_for(loc: Location):
    """A botocore client for the store `loc`'s filesystem reaches: its region and, from the URI's
    `?endpoint_override=` (and `scheme=`), its endpoint, which AWS_ENDPOINT_URL would otherwise
    replace: a conditional put sent to another store would write there."""
    if getattr(loc.fs, "type_name", "") != "s3":
        return None
    try:
        import botocore.session
    except ImportError:
        return None
    try:
        opts = loc.fs.__reduce__()[1][0]  # the S3FileSystem's own options (pyarrow shows them no other way)
    except Exception:
        opts = {}
    opts = opts if isinstance(opts, dict) else {}
    region = opts.get("region") or getattr(loc.fs, "region", None) or None
    endpoint = opts.get("endpoint_override") or None
    if endpoint and "://" not in endpoint:
        endpoint = f"{opts.get('scheme') or 'https'}://{endpoint}"
    if (region, endpoint) not in _CLIENTS:
        kw = {"endpoint_url": endpoint} if endpoint else {}
        _CLIENTS[region, endpoint] = botocore.session.get_session().create_client("s3", region_name=region, **kw)
    return _CLIENTS[region, endpoint]


def _precondition_failed(e) -> bool:
    """The object is not the one expected (another's now, or gone); a missing bucket is not that."""
    code = e.response.get("Error", {}).get("Code", "")
    return code in ("PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey") or \
        e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") in (409, 412)


def _fail(e, loc: Location, what: str) -> PacktoolError:
    code = e.response.get("Error", {}).get("Code", "") if hasattr(e, "response") else ""
    return unreached(e, loc.shown, loc.argument) or place_error(loc.argument)(
        f"cannot {what} ({code or type(e).__name__}); check the store's credentials chain", path=loc.shown)


def etag(loc: Location) -> str | None:
    """The object's ETag now (ABSENT when there is none); None where conditions are not offered."""
    client = client_for(loc)
    if client is None:
        return None
    from botocore.exceptions import ClientError
    bucket, _, key = loc.path.partition("/")
    try:
        return str(client.head_object(Bucket=bucket, Key=key)["ETag"])
    except ClientError as e:
        if e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404 or \
                e.response.get("Error", {}).get("Code", "") in ("404", "NoSuchKey", "NotFound"):
            return ABSENT
        raise _fail(e, loc, "read the object's ETag") from None


def put_if(loc: Location, body: bytes, expect: str) -> str | bool | None:
    """Put `body` only while the object's ETag is `expect` (ABSENT: only if it does not exist).
    Returns the new ETag, False when the object is not what was expected, None where the store
    offers no conditional put."""
    client = client_for(loc)
    if client is None:
        return None
    from botocore.exceptions import ClientError
    bucket, _, key = loc.path.partition("/")
    cond = {"IfNoneMatch": "*"} if expect == ABSENT else {"IfMatch": expect}
    try:
        return str(client.put_object(Bucket=bucket, Key=key, Body=body, **cond)["ETag"])
    except ClientError as e:
        if _precondition_failed(e):
            return False
        raise _fail(e, loc, "put the object") from None


def delete_if(loc: Location, expect: str) -> bool | None:
    """Delete the object only while its ETag is `expect`: True when deleted, False when it is
    not (another's now, or gone), None where the store offers no conditional delete."""
    client = client_for(loc)
    if client is None:
        return None
    from botocore.exceptions import ClientError
    bucket, _, key = loc.path.partition("/")
    try:
        client.delete_object(Bucket=bucket, Key=key, IfMatch=expect)
    except ClientError as e:
        if _precondition_failed(e):
            return False
        raise _fail(e, loc, "delete the object") from None
    return True


def _head(client, bucket: str, key: str) -> dict | None:
    """HeadObject's answer, None when there is no such object."""
    from botocore.exceptions import ClientError
    try:
        return client.head_object(Bucket=bucket, Key=key)
    except ClientError as e:
        if e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404 or \
                e.response.get("Error", {}).get("Code", "") in ("404", "NoSuchKey", "NotFound"):
            return None
        raise


@contextmanager
def no_new_marker(loc: Location) -> Iterator[None]:
    """Around a put and delete of one object under the prefix `loc` (storage.probe.check_uri's write
    probe): pyarrow's delete puts an empty marker object `PREFIX/` so the prefix stays listed, and
    a run that then failed left that marker on a store where it had written nothing (S45A-14).
    The marker the block made is deleted again, only while it is that empty object (by its
    ETag); one that was there before stays. Where the store offers no such request, or asking
    fails, the marker is left (it holds nothing)."""
    client = client_for(loc)
    bucket, _, key = loc.path.partition("/")
    if client is None or not key:
        yield
        return
    from botocore.exceptions import BotoCoreError, ClientError
    marker = key.rstrip("/") + "/"
    try:
        had = _head(client, bucket, marker) is not None
    except (BotoCoreError, ClientError):
        had = True  # unknown: never delete what may have been there
    try:
        yield
    finally:  # a block stopped (Ctrl-C, SIGTERM) made its marker all the same
        if not had:
            try:
                head = _head(client, bucket, marker)
                if head is not None and head.get("ContentLength") == 0:
                    client.delete_object(Bucket=bucket, Key=marker, IfMatch=head["ETag"])
            except (BotoCoreError, ClientError):
                pass  # another's put since, or no delete permission: an empty marker is harmless


def drop_markers(loc: Location) -> int:
    """Delete every empty folder object (`X/`, 0 bytes) under the prefix `loc`, its own included:
    pyarrow's delete puts one for the folder of each object it deletes, so a removal of what a
    packtool push put in its own cache entry (tokenize.store_push) left `KEY/data/`, `KEY/flat/`
    or `KEY/` there, holding nothing (L5). Each goes only while it is that empty object (by its
    ETag); objects with bytes are never touched. The caller answers for the prefix being
    packtool's own tree. Where the store offers no such request, or asking fails, they stay
    (they hold nothing). Returns how many went."""
    client = client_for(loc)
    bucket, _, key = loc.path.partition("/")
    if client is None or not key.strip("/"):
        return 0
    from botocore.exceptions import BotoCoreError, ClientError
    try:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key.strip("/") + "/")
        found = [(o["Key"], o["ETag"]) for page in pages for o in page.get("Contents", [])
                 if o["Key"].endswith("/") and o["Size"] == 0]
    except (BotoCoreError, ClientError):
        return 0
    gone = 0
    for marker, tag in found:
        try:
            client.delete_object(Bucket=bucket, Key=marker, IfMatch=tag)
            gone += 1
        except (BotoCoreError, ClientError):
            continue  # put over since (not empty now), or no delete permission: it holds nothing
    return gone


__all__ = ["ABSENT", "client_for", "delete_if", "drop_markers", "etag", "no_new_marker", "put_if"]
