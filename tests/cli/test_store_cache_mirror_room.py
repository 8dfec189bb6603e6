"""S47A-7: a store --cache-dir's local copy is built under the local cache root (PACKTOOL_CACHE_DIR,
or its default under HOME); a write there that failed for room was kind `io`, flag null, its fix
naming no place to move, where a local --cache-dir's is kind `cache` naming the flag. Now the
README's rule: kind `cache`, flag PACKTOOL_CACHE_DIR (the variable that places that copy), and the
fix "give PACKTOOL_CACHE_DIR a place on another disk". Held for each room error and for the root
set by the variable and by its default."""
from __future__ import annotations

import errno
import json

import pytest

import packtool.cli.failure as failure


def _report(monkeypatch, capsys, e, **args) -> dict:
    monkeypatch.setitem(failure._STATE, "args", args)
    monkeypatch.setitem(failure._STATE, "running", "pack")
    assert failure.report(e, json_out=True) == 2
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])["error"]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EFBIG, errno.EDQUOT])
@pytest.mark.parametrize("root", ["variable", "default"])
def test_a_store_caches_local_copy_out_of_room_is_the_caches(tmp_path, monkeypatch, capsys, code, root):
    local = tmp_path / "mirror"
    if root == "variable":
        monkeypatch.setenv("PACKTOOL_CACHE_DIR", str(local))
    else:
        monkeypatch.delenv("PACKTOOL_CACHE_DIR", raising=False)
        monkeypatch.setenv("HOME", str(tmp_path))
        from packtool.tokenize.cache_root import default_cache_dir
        local = default_cache_dir()
    where = f"{local}/store-46b7/.tmp-1/flat/tokens.i32"
    err = _report(monkeypatch, capsys, OSError(code, "no room", where), inputs=["s3://b/in/"], output="out",
                  cache_dir="s3://b/cache")
    assert (err["kind"], err["flag"]) == ("cache", "PACKTOOL_CACHE_DIR"), err
    assert "give PACKTOOL_CACHE_DIR a place on another disk" in err["message"], err["message"]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EFBIG])
@pytest.mark.parametrize("given", ["PACKTOOL_CACHE_DIR", "--cache-dir"])
def test_a_local_cache_root_out_of_room_names_what_placed_it(tmp_path, monkeypatch, capsys, code, given):
    """S48A-8: a local root set by PACKTOOL_CACHE_DIR (no --cache-dir) was said as --cache-dir's."""
    root = tmp_path / "root"
    monkeypatch.setenv("PACKTOOL_CACHE_DIR", str(root))
    args = {"inputs": ["in.jsonl"], "output": "out", "cache_dir": str(root) if given == "--cache-dir" else None}
    err = _report(monkeypatch, capsys, OSError(code, "no room", f"{root}/.tmp-1/flat/tokens.i32"), **args)
    assert (err["kind"], err["flag"]) == ("cache", given), err
    assert f"give {given} a place on another disk" in err["message"], err["message"]
