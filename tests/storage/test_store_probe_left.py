"""S46A-3: a store --cache-dir's write probe (`.packtool-probe-PID-HEX`, put and deleted before any
work) stayed for ever when the run was stopped between its put and its delete, and no later run
removed it. Now: a stop there (Ctrl-C, SIGTERM: an exception at that point) still deletes it;
a probe a SIGKILL left holds packtool's record (owner, time), and the next run with a cache on
that store removes it once its run is dead, saying so, at every entry that sweeps the root (the
local engine's pack, tokenize_to_cache, the Ray engine's tokenize step); an object of that name
in any other form (a user's, an older packtool's empty probe) stays."""
from __future__ import annotations

import json

import pytest
from conftest import GPT2, GSM8K, ray_grouped

import packtool.storage.probe as probe_mod
from packtool.storage import check_uri, locate, no_new_marker
from packtool.tokenize import TokenizeConfig


def _keys(s3: str) -> list[str]:
    import boto3
    got = boto3.client("s3").list_objects_v2(Bucket=s3.split("://", 1)[1]).get("Contents", [])
    return sorted(o["Key"] for o in got)


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit])
def test_a_stop_between_the_put_and_the_delete_leaves_no_probe(stop, s3, monkeypatch):
    real = probe_mod._put

    def put_then_stopped(probe):
        real(probe)
        assert probe.exists()
        raise stop(143)
    monkeypatch.setattr(probe_mod, "_put", put_then_stopped)
    monkeypatch.setattr(probe_mod, "_TAKES", set())
    with pytest.raises(stop):
        check_uri(f"{s3}/c", "cache_dir", write=True, around_probe=no_new_marker)  # as tokenize.cache_root
    assert _keys(s3) == []


def _src(tmp_path) -> str:
    path = tmp_path / "rows.jsonl"
    with open(GSM8K) as f:
        path.write_text("".join(f.readlines()[:10]))
    return str(path)


def _tokenize_to_cache(src, store, tmp_path):
    from packtool.tokenize import tokenize_to_cache
    tokenize_to_cache([src], TokenizeConfig(tokenizer=GPT2), cache_dir=store, progress=False)


def _pack(src, store, tmp_path):
    import packtool
    packtool.pack([src], tokenize=TokenizeConfig(tokenizer=GPT2), output=str(tmp_path / "o"), cache_dir=store)


def _ray(src, store, tmp_path):
    from packtool.engines.ray_engine import tokenized_cache
    tokenized_cache([src], TokenizeConfig(tokenizer=GPT2), store)


ENTRIES = {"library pack": _pack, "tokenize_to_cache": _tokenize_to_cache, "ray tokenized_cache": _ray}
DEAD = json.dumps({"owner": "pid 4242 on a-host-long-gone", "renewed": 0}).encode()
NOT_OURS = {"an older packtool's empty probe": b"", "a user's object": b"my notes",
            "a live run's": None}  # None: a record of now


@pytest.mark.parametrize("entry", ray_grouped(ENTRIES))
def test_a_killed_runs_probe_is_removed_by_the_next_run(entry, s3, tmp_path, monkeypatch, capsys, request):
    if entry.startswith("ray"):
        request.getfixturevalue("local_ray")
    monkeypatch.setenv("PACKTOOL_CACHE_DIR", str(tmp_path / "local"))
    store = f"{s3}/c"
    root = locate(store)
    root.join(".packtool-probe-4242-0badcafe").write_bytes(DEAD)
    kept = {}
    for i, (what, body) in enumerate(NOT_OURS.items()):
        name = f".packtool-probe-{4300 + i}-0000000{i}"
        kept[name] = body if body is not None else probe_mod._record()
        root.join(name).write_bytes(kept[name])
    capsys.readouterr()
    ENTRIES[entry](_src(tmp_path), store, tmp_path)
    err = capsys.readouterr().err
    assert "removed 1 write probe object(s)" in err and ".packtool-probe-4242-0badcafe" in err, err
    left = [k for k in _keys(s3) if ".packtool-probe-" in k]
    assert left == sorted(f"c/{n}" for n in kept), left
    assert all(root.join(n).read_bytes() == body for n, body in kept.items())
