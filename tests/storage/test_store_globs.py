"""A spec over an object store reads what the same spec reads over a folder (S44-2, S45A-12): a
prefix a glob matches is read whole, as a matched folder is; only `.` names are hidden (a `_` name
is read, as locally); a pattern ending in `/` matches prefixes only, as it matches folders only; a `?` that starts no key=value query is refused in
one line (in a URI it begins the query: `s3://b/in?` read the prefix `in`, `s3://b/i?.jsonl` was a
query parameter refused with another input as its fix)."""
from __future__ import annotations

import os

import pytest
from conftest import S3_ENV  # noqa: F401  (the s3 fixture's environment)

from packtool.storage import StorageError, locate

TREE = ["in/a.jsonl", "in/sub/c.jsonl", "in/.hidden/x.jsonl", "in2/b.jsonl", "in.jsonl", "other/in3.jsonl",
        "in/_u.jsonl", "in/.h.jsonl", "in/_part/d.jsonl", "in/deeper/b.jsonl", "in/deeper/deepest/c.jsonl"]


def _read(spec: str, root: str) -> set[str]:
    """The files packtool's input resolution reads for `spec` (what pack reads), below `root`."""
    from packtool.tokenize.readers import resolve_inputs
    return {f.path[len(root) + 1:] for f in resolve_inputs([spec], quiet=True)}


@pytest.fixture
def both(s3, tmp_path):
    import boto3
    bucket = s3[5:]
    for key in TREE:
        boto3.client("s3").put_object(Bucket=bucket, Key=f"t/{key}", Body=b'{"text": "x"}\n')
        os.makedirs(os.path.dirname(tmp_path / key), exist_ok=True)
        (tmp_path / key).write_text('{"text": "x"}\n')
    return f"{s3}/t", str(tmp_path)


# globs (S44-2), and (S45A-12) a folder itself, `_` names (read locally: only `.` is hidden), and
# patterns ending in `/` (folders only, locally)
SPECS = ["in*", "in2*", "in*/*.jsonl", "*", "**/*.jsonl", "other/*", "in/.hidden/*", "in", "in/", "in/*.jsonl",
         "in/**/*.jsonl", "in/*/", "in/deeper/*/", "*/", "in/_*"]


@pytest.mark.parametrize("spec", SPECS)
def test_a_store_spec_reads_what_the_same_spec_over_a_folder_reads(both, spec):
    store, local = both
    assert _read(f"{store}/{spec}", store) == _read(os.path.join(local, spec), local), spec


@pytest.mark.parametrize("tail", ["in?", "i?.jsonl", "in?x", "in?a=1&b"])
def test_a_question_mark_that_starts_no_query_is_refused(both, tail):
    store, _ = both
    with pytest.raises(StorageError, match=r"a '\?' that starts no key=value query is refused.*write \* to match"):
        locate(f"{store}/{tail}")
