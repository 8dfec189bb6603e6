"""A store's failure in one line: one that could not be reached or whose bucket is gone
(`unreached`), and the argument behind a store's later requests (`reading`, `argument_for`,
`store_failure`), so a store that stops answering half way is said naming the flag that gave
it, never as "corrupt". `_why`: the store's own reason, with nothing that could carry a request
signature. Standard library only, as `uri`.
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from contextvars import ContextVar
from urllib.parse import urlsplit

from packtool.errors import PacktoolError, arg, cli_flag
from packtool.free_memory import decode_out_of_memory
from packtool.storage.uri import is_uri, shown, store_error


def _why(e: BaseException) -> str:
    """The store's reason, one line, without anything that could carry a request signature;
    a long one cut at a word, marked so (not mid-word, as if it were the whole text)."""
    text = " ".join(str(e).split())
    text = re.sub(r"(?i)(signature|credential|authorization|x-amz-[a-z-]+)=\S+", r"\1=…", text)
    return text if len(text) <= 240 else text[:240].rsplit(" ", 1)[0] + " …"


# a store that gave no answer (no connection, a host name that does not resolve, a timeout), or
# one that answered for another region: the endpoint, the network or the region is wrong, not the
# object, and every later request would fail the same way after the SDK's retries
_NO_ANSWER = re.compile(r"NETWORK_CONNECTION|Could not (?:connect|resolve)|Connection refused|timed out|"
                        r"Timeout was reached|curlCode: (?:6|7|28|35)\b", re.I)
_OTHER_REGION = re.compile(r"HTTP status 301\b|PermanentRedirect|AuthorizationHeaderMalformed|"
                           r"region '[^']*' is wrong", re.I)


# the bucket (container) itself is gone: checked before any work, so it was deleted since; not
# the credentials' or the endpoint's fault, and every later request fails the same way
_NO_BUCKET = re.compile(r"NoSuchBucket|NO_SUCH_BUCKET|specified bucket does not exist|ContainerNotFound|"
                        r"container does not exist", re.I)


def _bucket_of(spec: str) -> str:
    return urlsplit(spec).netloc if is_uri(spec) else ""


def unreached(e: BaseException, spec: str, name: str | None = None) -> PacktoolError | None:
    """The one line for a store `spec` that could not be reached, or whose bucket is gone (else
    None: the store answered about the object, its answer is the caller's to say), naming the
    argument `name` that gave it (its flag on the command line), with the fix."""
    text = str(e)
    if _NO_BUCKET.search(text):
        lead = f"{arg(name)} names a location whose" if name else "its"
        return store_error(name)(f"{lead} bucket {_bucket_of(spec) or '?'} does not exist (deleted during the run?): "
                                 f"create it, or give {arg(name) + ' a location' if name else 'a location'} in an existing bucket",
                                 path=shown(spec), flag=name and cli_flag(name))
    if _OTHER_REGION.search(text):
        what, fix = "it answers for another region", "give the bucket's region (for S3: AWS_REGION, or ?region= in the URI)"
    elif _NO_ANSWER.search(text):
        what, fix = "no answer", ("check the endpoint, the network and the credentials chain (for S3: AWS_ENDPOINT_URL, "
                                  "AWS_REGION, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE)")
    else:
        return None
    lead = f"{arg(name)} names a store that" if name else "the store"
    return store_error(name)(f"{lead} cannot be reached ({what}: {_why(e)}); {fix}", path=shown(spec),
                             flag=name and cli_flag(name))


# --- the argument behind a store's later requests --------------------------------------
# A reader's first request (its manifest) names the argument that gave the URI; its later ones
# (shards, checksums, row groups: in another function, maybe another thread) did not, so a store
# that stopped answering half way was "the store cannot be reached" or a raw Arrow error. Within
# `reading`, every request below the URI names it, and `store_failure` says a caught one so.
_READING: ContextVar[tuple[str, str] | None] = ContextVar("packtool_reading", default=None)


def argument_for(spec: str) -> str | None:
    """The argument that gave the store URI `spec` (or a prefix above it), within `reading`."""
    held = _READING.get()
    if held is None or not is_uri(spec):
        return None
    base, s = held[0], shown(spec).rstrip("/")
    return held[1] if s == base or s.startswith(base + "/") else None


@contextmanager
def reading(spec: str, name: str | None):
    """Requests of the store output `spec` that argument `name` gave, after its first: each names
    `name` (its flag on the command line) when the store stops answering, and a raw OSError that
    leaves the block (an Arrow file read half way) is that one line too."""
    if name is None or not is_uri(spec):
        yield
        return
    token = _READING.set((shown(spec).rstrip("/"), name))
    try:
        yield
    except OSError as e:
        if (err := unreached(e, spec, name)) is not None:
            raise err from None
        raise
    finally:
        _READING.reset(token)


def store_failure(e: BaseException, path: str, part: str | None = None) -> BaseException | None:
    """For an error a reader caught reading `path` (its `part`, e.g. `row group 3`; else None:
    the file's own problem, the caller's to say): a store that stopped answering, named as
    `reading` names it, or an allocation that failed decoding it (a MemoryError: the CLI's
    out-of-memory line); never "corrupt"."""
    if (oom := decode_out_of_memory(e, path, part)) is not None:
        return oom
    return unreached(e, path, argument_for(path)) if is_uri(path) else None


__all__ = ["argument_for", "reading", "store_failure", "unreached"]
