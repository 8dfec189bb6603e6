"""On a store one name can be an object and a prefix at once (`in/a.jsonl`, and `in/a.jsonl/part-0.jsonl`
below it: a single-file write, later a folder of parts at the same name). `s3://b/in/a.jsonl/` (the
prefix, as a local `dir/` is a folder) read the object and none of the objects below, rc 0, and
`s3://b/in/a.jsonl` read the object without a word of the prefix (S45A-10). Now a URI ending in `/`
is the prefix, and a name that is both is refused in one line naming both, never resolved silently
to one; a `/` after an object alone is refused as a local `file/` is."""
from __future__ import annotations

import json

import pytest
from conftest import GPT2, S3_ENV  # noqa: F401  (S3_ENV: the s3 fixture's environment)

from packtool.errors import PacktoolError
from packtool.storage import expand

TREE = {"in/a.jsonl": 1, "in/a.jsonl/part-0.jsonl": 2, "in/b.jsonl": 1, "in/c/part-0.jsonl": 3}
# spec below the tree's root -> the objects read, or the words of the refusal
CASES = {
    "in/a.jsonl/": {"in/a.jsonl/part-0.jsonl"},
    "in/a.jsonl": "is both an object and a prefix holding 1 object (a.jsonl/part-0.jsonl)",
    "in/b.jsonl": {"in/b.jsonl"},
    "in/b.jsonl/": "is an object, not a prefix: drop the trailing /",
    "in/c": {"in/c/part-0.jsonl"},
    "in/c/": {"in/c/part-0.jsonl"},
    "in/": {"in/a.jsonl", "in/a.jsonl/part-0.jsonl", "in/b.jsonl", "in/c/part-0.jsonl"},
}


@pytest.fixture
def tree(s3):
    import boto3
    c = boto3.client("s3")
    for key, rows in TREE.items():
        body = "".join(json.dumps({"text": f"{key} row {i}"}) + "\n" for i in range(rows))
        c.put_object(Bucket=s3[5:], Key=f"t/{key}", Body=body.encode())
    return f"{s3}/t"


@pytest.mark.parametrize("spec", list(CASES))
def test_a_name_that_is_an_object_and_a_prefix_is_never_read_as_one_silently(tree, spec):
    want = CASES[spec]
    if isinstance(want, str):
        with pytest.raises(PacktoolError) as e:
            expand(f"{tree}/{spec}", name="inputs")
        said = str(e.value)
        assert want in said and "\n" not in said and f"{tree}/{spec.rstrip('/')}" in said, said
    else:
        assert {x.shown[len(tree) + 1:] for x in expand(f"{tree}/{spec}")} == want


@pytest.mark.parametrize("spec", list(CASES))
def test_pack_reads_or_refuses_them_alike(tree, spec, tmp_path):
    from typer.testing import CliRunner

    from packtool.cli.app import app
    r = CliRunner().invoke(app, ["pack", f"{tree}/{spec}", "--tokenizer", GPT2, "-C", "64", "--dry-run", "--json", "-q",
                                 "--cache-dir", str(tmp_path / "cache")])
    want = CASES[spec]
    if isinstance(want, str):
        assert r.exit_code == 2 and "Traceback" not in r.output, r.output
        assert want in json.loads(r.stdout)["error"]["message"], r.output
    else:
        assert r.exit_code == 0, r.output
        assert json.loads(r.output)["sequences"] == sum(TREE[k] for k in want), r.output


@pytest.mark.parametrize("spec, want", [("in/b.jsonl", {"in/b.jsonl"}), ("in/c", {"in/c/part-0.jsonl"}),
                                        ("in/c/", {"in/c/part-0.jsonl"}), ("in/b.jsonl/", None)])
def test_a_file_uri_reads_a_file_or_a_folder(tmp_path, spec, want):
    """file:// goes through the same rule: a file is read without listing it as a folder."""
    for key in ("in/b.jsonl", "in/c/part-0.jsonl"):
        (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / key).write_text('{"text": "x"}\n')
    uri = f"file://{tmp_path}/{spec}"
    if want is None:
        with pytest.raises(PacktoolError, match="drop the trailing /") as e:
            expand(uri, name="inputs")
        assert str(e.value).startswith(f"{tmp_path}/{spec}: is an object"), str(e.value)
    else:
        assert {x.path[len(str(tmp_path)) + 1:] for x in expand(uri)} == want
