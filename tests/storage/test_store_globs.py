"""A glob over an object store reads what the same glob reads over a folder (S44-2): a prefix it
matches is read whole, as a matched folder is; a `?` that starts no key=value query is refused in
one line (in a URI it begins the query: `s3://b/in?` read the prefix `in`, `s3://b/i?.jsonl` was a
query parameter refused with another input as its fix)."""
from __future__ import annotations

import glob
import os

import pytest
from conftest import S3_ENV  # noqa: F401  (the s3 fixture's environment)

from packtool.storage import StorageError, locate
from packtool.storage_glob import expand

TREE = ["in/a.jsonl", "in/sub/c.jsonl", "in/.hidden/x.jsonl", "in2/b.jsonl", "in.jsonl", "other/in3.jsonl"]


def _local(root, pattern: str) -> set[str]:
    """What a local glob reads: each match, a matched folder's visible files below it."""
    out = set()
    for m in glob.glob(os.path.join(root, pattern), recursive=True):
        if os.path.isdir(m):
            for d, dirs, files in os.walk(m):
                dirs[:] = [x for x in dirs if not x.startswith((".", "_"))]
                out |= {os.path.relpath(os.path.join(d, f), root) for f in files if not f.startswith((".", "_"))}
        else:
            out.add(os.path.relpath(m, root))
    return out


@pytest.fixture
def both(s3, tmp_path):
    import boto3
    bucket = s3[5:]
    for key in TREE:
        boto3.client("s3").put_object(Bucket=bucket, Key=f"t/{key}", Body=b'{"text": "x"}\n')
        os.makedirs(os.path.dirname(tmp_path / key), exist_ok=True)
        (tmp_path / key).write_text('{"text": "x"}\n')
    return f"{s3}/t", str(tmp_path)


@pytest.mark.parametrize("pattern", ["in*", "in2*", "in*/*.jsonl", "*", "**/*.jsonl", "other/*", "in/.hidden/*"])
def test_a_store_glob_reads_what_a_local_glob_reads(both, pattern):
    store, local = both
    got = {p.shown[len(store) + 1:] for p in expand(f"{store}/{pattern}")}
    assert got == _local(local, pattern), pattern


@pytest.mark.parametrize("tail", ["in?", "i?.jsonl", "in?x", "in?a=1&b"])
def test_a_question_mark_that_starts_no_query_is_refused(both, tail):
    store, _ = both
    with pytest.raises(StorageError, match=r"a '\?' that starts no key=value query is refused.*write \* to match"):
        locate(f"{store}/{tail}")
