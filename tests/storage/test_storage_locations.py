"""packtool.storage: one resolution of a path or URI, the object-store side checked against the
in-process S3 endpoint (tests/conftest.py `s3`)."""
from __future__ import annotations

import pytest

from packtool.storage import StorageError, expand, is_uri, locate, shown


@pytest.mark.parametrize("spec", ["ftp://host/data.jsonl", "http://example.com/x.parquet", "weird+x://a/b"])
def test_an_unknown_scheme_is_one_line(spec):
    with pytest.raises(StorageError, match="is not supported") as e:
        locate(spec)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("spec", ["s3://AKIAXXX:supersecret@bucket/out", "s3://bucket/out?secret_key=supersecret",
                                  "s3://bucket/out?access_key=AKIAXXX&x=1", "gs://bucket/o?session_token=supersecret"])
def test_credentials_in_a_uri_are_refused_without_echoing_them(spec):
    with pytest.raises(StorageError) as e:
        locate(spec)
    assert "supersecret" not in str(e.value) and "AKIAXXX" not in str(e.value)


def test_shown_drops_user_info_and_query():
    assert shown("s3://u:p@bucket/a/b?region=x") == "s3://bucket/a/b"
    assert shown("plain/path") == "plain/path" and not is_uri("C:\\data") and is_uri("s3://b")


def test_local_paths_and_file_uris_are_local(tmp_path):
    a, b = locate(str(tmp_path)), locate(f"file://{tmp_path}")
    assert a.local and b.local and a.path == b.path == str(tmp_path)


def test_write_list_read_delete_on_the_endpoint(s3):
    root = locate(s3 + "/data")
    assert not root.is_dir() and root.list() == []
    for name in ("a.parquet", "sub/b.jsonl", "sub/c/d.jsonl", ".hidden", "_x"):
        root.join(*name.split("/")).write_bytes(name.encode())
    assert root.is_dir() and root.join("a.parquet").is_file()
    assert root.join("sub", "b.jsonl").read_bytes() == b"sub/b.jsonl"
    # `.` names are hidden, `_` names are read: a local folder's rule (S45A-12)
    assert [x.shown for x in expand(s3 + "/data")] == [f"{s3}/data/{n}" for n in ("_x", "a.parquet", "sub/b.jsonl",
                                                                                  "sub/c/d.jsonl")]
    assert [x.name for x in expand(s3 + "/data/sub/*.jsonl")] == ["b.jsonl"]
    assert [x.name for x in expand(s3 + "/data/**/*.jsonl")] == ["b.jsonl", "d.jsonl"]
    assert root.join("a.parquet").delete() and not root.join("a.parquet").delete()
    with pytest.raises(FileNotFoundError):
        root.join("nope").read_bytes()


def test_an_fsspec_filesystem_object(tmp_path):
    fsspec = pytest.importorskip("fsspec")
    mem = fsspec.filesystem("memory")
    loc = locate("/packtool-test/x.bin", filesystem=mem)
    loc.write_bytes(b"abc")
    assert loc.read_bytes() == b"abc" and loc.is_file() and not loc.local
