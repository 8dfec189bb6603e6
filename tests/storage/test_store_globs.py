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
    from urllib.parse import unquote
    from packtool.tokenize.readers import resolve_inputs
    said = unquote if "://" in root else str  # an object's URI holds its key percent-encoded
    return {said(f.path[len(root) + 1:]) for f in resolve_inputs([spec], quiet=True)}


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


# one listing rule for a glob's character classes (S49A-4): a class reads as Python's glob reads
# it locally (`[^a]` is `^` or `a`, `[!a]` is not `a`, a leading `]` is a member, a class never
# matches the `/` between names, `[` with no `]` before the next `/` is itself; `**` crosses folders only
# as a whole name, within one it is `*`), and a name that
# exists as typed is itself, glob characters and all (`[1].jsonl`), on a store as in a folder
CLASS_TREE = ["c/a.jsonl", "c/b.jsonl", "c/^.jsonl", "c/].jsonl", "c/!.jsonl", "c/-.jsonl", "c/x/y.jsonl",
              "c/xby.jsonl", "c/[a.jsonl", "c/1.jsonl", "c/[1].jsonl", "c/x[/y.jsonl"]
CLASS_SPECS = ["c/[^a]*.jsonl", "c/[!a]*.jsonl", "c/[]a]*.jsonl", "c/[!]a]*.jsonl", "c/[a-b]*.jsonl",
               "c/[!a-b]*.jsonl", "c/[-a]*.jsonl", "c/[b-a]*.jsonl", "c/x[!a]y*", "c/x[/]y*", "c/[a*.jsonl",
               "c/[[]a*", "c/[1].jsonl", "c/[!1].jsonl", "c/x[/y*", "c/x**y.jsonl", "c/**.jsonl", "**c/*"]

# a folder (a prefix) a glob matches is one of the glob's matches (S49A-5): its other files noted,
# nothing refused unless the glob as a whole finds no data, as `DIR` and `DIR/**` read the tree
FOLDER_TREE = ["le/data/a.jsonl", "le/docs/README.md", "le/empty/"]
FOLDER_SPECS = ["le", "le/", "le/**", "le/*", "le/**/*", "le/*/", "le/**/", "le/[de]*", "le/d*", "le/do*", "le/e*",
                "le/*/*"]


def _outcome(spec: str, root: str) -> set[str] | str:
    from packtool.errors import PacktoolInputError
    try:
        return _read(spec, root)
    except PacktoolInputError:  # (one line naming the input: the message tests of each door say which)
        return "refused"


def _tree(s3, tmp_path, keys: list[str]) -> tuple[str, str]:
    import boto3
    bucket = s3[5:]
    for key in keys:
        if key.endswith("/"):  # an empty folder: a marker object on a store
            boto3.client("s3").put_object(Bucket=bucket, Key=f"t/{key}", Body=b"")
            os.makedirs(tmp_path / key, exist_ok=True)
            continue
        body = b"see data/\n" if key.endswith(".md") else b'{"text": "x"}\n'
        boto3.client("s3").put_object(Bucket=bucket, Key=f"t/{key}", Body=body)
        os.makedirs(os.path.dirname(tmp_path / key), exist_ok=True)
        (tmp_path / key).write_bytes(body)
    return f"{s3}/t", str(tmp_path)


@pytest.mark.parametrize("tree,specs", [(CLASS_TREE, CLASS_SPECS), (FOLDER_TREE, FOLDER_SPECS)],
                         ids=["character classes", "folders a glob matches"])
def test_a_store_glob_lists_what_the_same_local_glob_lists(s3, tmp_path, tree, specs):
    from urllib.parse import quote
    store, local = _tree(s3, tmp_path, tree)
    # the URI as packtool's refusal of a raw `[` asks for it: `[`, `]`, `^` percent-encoded
    got = {spec: (_outcome(f"{store}/{quote(spec, safe='/*!')}", store), _outcome(os.path.join(local, spec), local))
           for spec in specs}
    assert {s: g for s, g in got.items() if g[0] != g[1]} == {}
    if tree is FOLDER_TREE:  # data is read through every door that reaches it
        assert {s for s, (_, here) in got.items() if here != {"le/data/a.jsonl"}} == {"le/do*", "le/e*"}
    else:
        assert got["c/[^a]*.jsonl"][1] == {"c/^.jsonl", "c/a.jsonl"}  # Python's glob: `^` is a member
        assert got["c/[1].jsonl"][1] == {"c/[1].jsonl"}  # the name as typed


@pytest.mark.parametrize("where", ["local", "store"])
def test_a_glob_notes_the_other_files_of_a_folder_it_matches(s3, tmp_path, where):
    from packtool.notes import NOTES
    store, local = _tree(s3, tmp_path, FOLDER_TREE)
    start = len(NOTES)
    from packtool.tokenize.readers import resolve_inputs
    resolve_inputs([f"{store}/le/*" if where == "store" else os.path.join(local, "le", "*")])
    assert any("passed over 1 file" in n and "README.md" in n for n in NOTES[start:]), NOTES[start:]
