"""`verify --source` with `--cache-dir s3://...` (S43-7): its temporary cache (a fresh tokenize of
the source) never lands on the store, whatever the run's end (passed, problems found, an error, an
interrupt) and wherever the output is (a folder, a store prefix); the one an older packtool left
there is removed by the next such run, only when every object in it is a cache entry's file, and a
look-alike holding anything else is kept."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import GPT2, GSM8K

from packtool.storage import locate

PACK = ["--tokenizer", GPT2, "--max-tokens", "1024", "--no-progress"]


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "packtool", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.getcwd(), **(env or {})})


def _keys(uri: str) -> list[str]:
    import boto3
    bucket, _, prefix = uri.split("://", 1)[1].partition("/")
    got = boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return sorted(o["Key"] for o in got)


def _source(tmp_path, how: str) -> str:
    rows = [json.loads(line) for line in open(GSM8K)][:20]
    if how == "problems":  # the same rows but one: its tokens differ from what was packed
        rows[3]["question"] += " And one more thing."
    path = tmp_path / f"src-{how}.jsonl"
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if how == "error":
        text += "{not json\n"
    path.write_text(text)
    return str(path)


@pytest.fixture
def packed(s3, tmp_path):
    """(local cache root, store cache root, {placement: output}) after packing 20 rows."""
    local_root, store_cache = tmp_path / "local-cache", f"{s3}/cache"
    env = {"PACKTOOL_CACHE_DIR": str(local_root)}
    src = _source(tmp_path, "ok")
    outs = {"folder": str(tmp_path / "out"), "store": f"{s3}/out"}
    for out in outs.values():
        r = _cli("pack", src, *PACK, "-o", out, "--cache-dir", store_cache, env=env)
        assert r.returncode == 0, r.stderr
    return local_root, store_cache, outs, env


def _no_temporary(local_root, store_cache) -> None:
    assert not [k for k in _keys(store_cache) if ".verify-source" in k]
    assert not [n for n in os.listdir(local_root) if n.startswith(".verify-source")] if local_root.exists() else True


@pytest.mark.parametrize("placement", ["folder", "store"])
@pytest.mark.parametrize("how,code", [("ok", 0), ("problems", 1), ("error", 2)])
def test_verify_source_leaves_no_temporary_cache_on_the_store(packed, tmp_path, placement, how, code):
    local_root, store_cache, outs, env = packed
    before = _keys(store_cache)
    r = _cli("verify", "--source", _source(tmp_path, how), "--cache-dir", store_cache, outs[placement], env=env)
    assert r.returncode == code, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    _no_temporary(local_root, store_cache)
    assert _keys(store_cache) == before  # the store cache as the pack left it


def test_an_interrupted_verify_source_leaves_no_temporary_cache(packed, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import packtool.tokenize.flat_tokens as flat
    from packtool.cli.app import app
    local_root, store_cache, outs, env = packed
    monkeypatch.setenv("PACKTOOL_CACHE_DIR", env["PACKTOOL_CACHE_DIR"])

    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(flat, "flat_store_for", interrupted)
    r = CliRunner().invoke(app, ["verify", "--source", _source(tmp_path, "ok"), "--cache-dir", store_cache, outs["store"]])
    assert r.exit_code != 0
    _no_temporary(local_root, store_cache)


def _leftover(store_cache: str, name: str, extra: bytes | None = None) -> list[str]:
    """What an older packtool's verify --source left: a copy of a committed entry under NAME/."""
    root = locate(store_cache)
    entry = next(n for n in {k.split("/")[1] for k in _keys(store_cache)} if len(n) == 32)
    put = []
    for key in _keys(f"{store_cache}/{entry}"):
        rel = key.split(f"/{entry}/", 1)[1]
        root.join(name, entry, *rel.split("/")).write_bytes(root.join(entry, *rel.split("/")).read_bytes())
        put.append(rel)
    if extra is not None:
        root.join(name, entry, "mine.txt").write_bytes(extra)
    return put


def test_a_leftover_of_an_older_verify_is_removed_and_a_look_alike_kept(packed, tmp_path):
    local_root, store_cache, outs, env = packed
    _leftover(store_cache, ".verify-source-4242-abcd1234")
    look_alike = _leftover(store_cache, ".verify-source-4343-efgh5678", extra=b"my file")
    r = _cli("verify", "--source", _source(tmp_path, "ok"), "--cache-dir", store_cache, outs["folder"], env=env)
    assert r.returncode == 0, r.stderr
    keys = _keys(store_cache)
    assert not [k for k in keys if ".verify-source-4242" in k]
    assert any(".verify-source-4343-efgh5678/" in k and k.endswith("/mine.txt") for k in keys)
    assert len([k for k in keys if ".verify-source-4343" in k]) == len(look_alike) + 1  # kept whole
    assert "removed 1 temporary cache" in r.stderr and "kept" in r.stderr and "4343" in r.stderr, r.stderr
