"""S50A-2: a read-only cache root holding an entry with no flat store (built by --engine ray, or its
flat/ removed) failed in the local engine as a bare `.../flat.tmp-PID-X: Read-only file system`.
The entry's flat store is built only where the root takes a folder; else one line naming
--cache-dir, why and the fix (tokenize.cache_root.refuse_unwritable_entry), nothing left there.
The root's read-only state is stood in for by its probe (root ignores permission bits)."""
from __future__ import annotations

import json
import os

import pytest
from conftest import LOCAL_RAY_GROUP
from rows_support import token_rows_jsonl
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.tokenize import cache_root

runner = CliRunner()


@pytest.fixture
def entry(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    token_rows_jsonl(tmp_path)
    r = runner.invoke(app, ["pack", "toks.jsonl", "-C", "64", "--cache-dir", "c", "--engine", "ray", "--dry-run",
                            "--no-progress", "-q"])
    assert r.exit_code == 0, r.stdout + r.stderr
    (key,) = os.listdir("c")
    return os.path.join("c", key)


def _read_only(monkeypatch):
    monkeypatch.setattr(cache_root, "_cannot_make", lambda base: "Read-only file system")


@LOCAL_RAY_GROUP
def test_a_read_only_root_refuses_a_ray_built_entry_in_one_line(entry, monkeypatch):
    assert not os.path.lexists(os.path.join(entry, "flat"))  # a Ray-built entry: its tokens in data/ alone
    before = sorted(os.listdir(entry))
    _read_only(monkeypatch)
    r = runner.invoke(app, ["--json", "pack", "toks.jsonl", "-C", "64", "--cache-dir", "c", "-o", "o1",
                            "--no-progress", "-q"])
    assert r.exit_code == 2, r.stdout + r.stderr
    err = json.loads(r.stdout.strip().splitlines()[-1])["error"]
    assert err["kind"] == "cache" and err["flag"] == "--cache-dir", err
    assert "Read-only file system" in err["message"] and "no flat token store" in err["message"], err
    assert "give another --cache-dir" in err["message"] and ".tmp" not in err["message"], err
    assert sorted(os.listdir(entry)) == before and not os.path.lexists("o1")
