"""A tokenized cache root on a store follows a folder root's rules, at every entry that takes
one (pack on both engines and its dry run, the library's tokenize_to_cache and the Ray engine's
tokenize step): `--cache-dir s3://b/OBJECT` is refused as a local `--cache-dir FILE` and
`-o s3://b/OBJECT` are (S45A-11: its entries were written under `OBJECT/` beside it), and a run
that fails leaves no prefix marker where the store held nothing (S45A-14: the write probe's
delete left `ROOT/`, 0 bytes, as locally a failed run's --cache-dir folders are removed)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import GPT2, GSM8K

from packtool.errors import PacktoolError
from packtool.tokenize import TokenizeConfig


def _keys(s3: str) -> list[str]:
    import boto3
    got = boto3.client("s3").list_objects_v2(Bucket=s3.split("://", 1)[1]).get("Contents", [])
    return sorted(f"{o['Key']} {o['Size']}" for o in got)


def _src(tmp_path, chat: bool = False) -> str:
    path = tmp_path / ("chat.jsonl" if chat else "rows.jsonl")
    if chat:  # chat rows without a template: refused after the cache root was checked
        path.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"q{i}"},
                                                         {"role": "assistant", "content": f"a{i}"}]}) + "\n"
                                for i in range(5)))
    else:
        with open(GSM8K) as f:
            path.write_text("".join(f.readlines()[:10]))
    return str(path)


def _lib(entry: str):
    def run(src, cache_dir, out):
        cfg = TokenizeConfig(tokenizer=GPT2)
        if entry == "pack":
            import packtool
            packtool.pack([src], tokenize=cfg, output=out, cache_dir=cache_dir)
        elif entry == "tokenize_to_cache":
            from packtool.tokenize import tokenize_to_cache
            tokenize_to_cache([src], cfg, cache_dir=cache_dir, progress=False)
        elif entry == "ray tokenized_cache":
            from packtool.engines.ray_engine import tokenized_cache
            tokenized_cache([src], cfg, cache_dir)
    return run


def _cli(*extra):
    def run(src, cache_dir, out):
        r = subprocess.run([sys.executable, "-m", "packtool", "pack", src, "--tokenizer", GPT2, "-C", "1024", "-q",
                            "-o", out, "--cache-dir", cache_dir, *extra], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": os.getcwd()})
        if r.returncode:
            raise PacktoolError(r.stderr) if r.returncode == 2 and "Traceback" not in r.stderr else \
                AssertionError(r.stderr)
        return r
    return run


ENTRIES = {"library pack": _lib("pack"), "library tokenize_to_cache": _lib("tokenize_to_cache"),
           "library ray tokenized_cache": _lib("ray tokenized_cache"), "cli pack": _cli(),
           "cli pack --dry-run": _cli("--dry-run"), "cli pack --engine ray": _cli("--engine", "ray")}


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_cache_root_that_is_an_object_is_refused(entry, s3, tmp_path, monkeypatch):
    monkeypatch.setenv("PACKTOOL_CACHE_DIR", str(tmp_path / "local"))
    import boto3
    boto3.client("s3").put_object(Bucket=s3.split("://", 1)[1], Key="objcache", Body=b"mine")
    before = _keys(s3)
    with pytest.raises(PacktoolError) as e:
        ENTRIES[entry](_src(tmp_path), f"{s3}/objcache", str(tmp_path / "out"))
    message = str(e.value).strip()
    assert len(message.splitlines()) == 1 and "is an object, not a prefix" in message, message
    assert ("--cache-dir" if entry.startswith("cli") else "cache_dir") in message, message
    assert _keys(s3) == before and not os.path.exists(tmp_path / "out")


@pytest.mark.parametrize("root", ["cfl", "cfl/deep"])
@pytest.mark.parametrize("entry", ENTRIES)
def test_a_failed_run_leaves_no_marker_of_a_new_cache_root(entry, root, s3, tmp_path, monkeypatch):
    monkeypatch.setenv("PACKTOOL_CACHE_DIR", str(tmp_path / "local"))
    with pytest.raises(PacktoolError) as e:
        ENTRIES[entry](_src(tmp_path, chat=True), f"{s3}/{root}", str(tmp_path / "out"))
    assert "chat template" in str(e.value)
    assert _keys(s3) == []
    assert not os.path.exists(tmp_path / "local")  # nor the local root its mirror was made in


@pytest.mark.parametrize("entry", ["library tokenize_to_cache", "cli pack"])
def test_a_cache_root_that_held_a_marker_keeps_it(entry, s3, tmp_path, monkeypatch):
    """Only what the run made goes: a prefix marker the user (or an earlier run) put stays."""
    monkeypatch.setenv("PACKTOOL_CACHE_DIR", str(tmp_path / "local"))
    import boto3
    boto3.client("s3").put_object(Bucket=s3.split("://", 1)[1], Key="mine/", Body=b"")
    with pytest.raises(PacktoolError):
        ENTRIES[entry](_src(tmp_path, chat=True), f"{s3}/mine", str(tmp_path / "out"))
    assert _keys(s3) == ["mine/ 0"]
