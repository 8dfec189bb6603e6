"""A push of a tokenized-cache entry to a store that fails removes what it provably put, and
pyarrow's delete leaves an empty `PREFIX/` object for each folder it empties (`KEY/data/`,
`KEY/flat/`, the cache root): the push's failure left those markers where the store held
nothing before (L5). Every remover of a push's files: the local engine's push failing in this
process, the same replacing a damaged entry, the Ray engine's build failing before its commit,
and the next run's sweep of a dead push. The markers inside the entry (packtool's own tree)
go, and the root's where the removal made it; one the user put at the root or beside the entry
stays, with every object packtool did not write."""
from __future__ import annotations

import json

import pytest
from conftest import GPT2, GSM8K, ray_grouped

from packtool.storage import locate
from packtool.tokenize import TokenizeConfig, tokenize_to_cache

CFG = TokenizeConfig(tokenizer=GPT2)


class StoreWentAway(Exception):
    pass


def _keys(s3: str) -> list[str]:
    import boto3
    got = boto3.client("s3").list_objects_v2(Bucket=s3.split("://", 1)[1]).get("Contents", [])
    return sorted(f"{o['Key']} {o['Size']}" for o in got)


def _src(tmp_path) -> str:
    path = tmp_path / "rows.jsonl"
    with open(GSM8K) as f:
        path.write_text("".join(f.readlines()[:10]))
    return str(path)


def _fail_local_upload(monkeypatch):
    """The local engine's push stops at its third file (two are up: data/ and flat/ parts)."""
    import packtool.tokenize.store_cache as sc
    orig, done = sc.upload, []

    def upload(src, dst):
        if len(done) == 2:
            raise StoreWentAway("the store went away")
        orig(src, dst)
        done.append(dst.name)
    monkeypatch.setattr(sc, "upload", upload)


def _local_push(src, store, tmp_path, monkeypatch, request):
    _fail_local_upload(monkeypatch)
    tokenize_to_cache([src], CFG, cache_dir=store, progress=False)


def _damaged_entry(src, store, tmp_path, monkeypatch):
    """A committed entry (an earlier run's) whose tokens lost a bit: the next push replaces it."""
    tokenize_to_cache([src], CFG, cache_dir=store, progress=False)
    tokens = next(i for i in locate(store).list() if i.path.endswith("/flat/tokens.i32"))
    obj = locate(store).join(tokens.path[len(locate(store).path) + 1:])
    data = bytearray(obj.read_bytes())
    data[100] ^= 1
    obj.write_bytes(bytes(data))
    monkeypatch.setenv("PACKTOOL_CACHE_DIR", str(tmp_path / "b"))  # another machine: a fresh mirror


def _ray_build(src, store, tmp_path, monkeypatch, request):
    request.getfixturevalue("local_ray")
    import packtool.engines.ray_cache as rc

    def commit_entry(*a, **k):  # every part is up (with its proof), its cache.json not yet
        raise StoreWentAway("the store went away")
    monkeypatch.setattr(rc, "commit_entry", commit_entry)
    from packtool.engines.ray_engine import tokenized_cache
    tokenized_cache([src], CFG, store)


def _dead_push_swept(src, store, tmp_path, monkeypatch, request):
    """A push that died (its marker stale, nothing removed), then the next run's sweep."""
    from packtool.tokenize.store_push import Push, sweep_pushes
    with pytest.MonkeyPatch.context() as killed, pytest.raises(StoreWentAway):
        killed.setattr(Push, "__exit__", lambda self, *a: self._stop.set())  # no clean-up
        _local_push(src, store, tmp_path, killed, request)
    root = locate(store)
    (marker,) = [n for n in root.names() if n.startswith(".packtool-push-")]
    rec = json.loads(root.join(marker).read_bytes())
    root.join(marker).write_bytes(json.dumps(dict(rec, renewed=0)).encode())  # not renewed since
    assert sweep_pushes(store) >= 2
    raise StoreWentAway("swept")


REMOVERS = {"local push": _local_push, "local push replacing a damaged entry": _local_push,
            "ray build": _ray_build, "the next run's sweep of a dead push": _dead_push_swept}


def _fails(remover, s3, tmp_path, monkeypatch, request, root="cache") -> list[str]:
    """The push fails (its set-up done first); the store's keys before the failing run."""
    if remover == "ray build":
        pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'packtool[ray]')")
    monkeypatch.setenv("PACKTOOL_CACHE_DIR", str(tmp_path / "a"))
    src, store = _src(tmp_path), f"{s3}/{root}"
    if "damaged" in remover:
        _damaged_entry(src, store, tmp_path, monkeypatch)
    before = _keys(s3)
    with pytest.raises(StoreWentAway):
        REMOVERS[remover](src, store, tmp_path, monkeypatch, request)
    return before


@pytest.mark.parametrize("remover", ray_grouped(REMOVERS))
def test_a_failed_push_leaves_no_marker_it_made(remover, s3, tmp_path, monkeypatch, request):
    before = _fails(remover, s3, tmp_path, monkeypatch, request)
    now = _keys(s3)
    made = [k for k in now if k.endswith("/ 0") and k not in before]
    inside = [k for k in now if k.endswith("/ 0") and k.count("/") > 1]  # in an entry: packtool's own tree
    assert made == [] and inside == [], now
    if "damaged" in remover:  # what the push replaced, then removed: only the damaged object is not its own
        assert [k for k in now if k not in before] == [] and len(now) <= len(before)
        assert any(k.split(" ")[0].endswith("/flat/tokens.i32") for k in now), now
    else:
        assert now == before, now  # nothing of the push: no file, proof, marker or prefix marker


@pytest.mark.parametrize("remover", ray_grouped(["local push", "ray build", "the next run's sweep of a dead push"]))
def test_markers_and_objects_that_were_there_stay(remover, s3, tmp_path, monkeypatch, request):
    """A marker the user put at the root and beside an entry, and the user's object: kept."""
    import boto3
    bucket = s3.split("://", 1)[1]
    for key, body in (("cache/", b""), ("cache/mine/", b""), ("notes.txt", b"mine")):
        boto3.client("s3").put_object(Bucket=bucket, Key=key, Body=body)
    before = _fails(remover, s3, tmp_path, monkeypatch, request)
    assert _keys(s3) == before
