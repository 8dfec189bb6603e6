"""Issue 23, left at stop 35: a killed object-store run's intent names the shards it wrote and
the ones it replaces; the next run deletes a named object only on the folders' proof (name,
plain object, the size and checksum that run recorded: output.owned.shard_is_ours). A user's
object put at a named name after the kill stays byte-identical and is named; a leftover the
dead run could not prove is kept and said, never deleted on its name alone. Parametrized over
every kind of leftover a run can be killed with (output.store's steps)."""
from __future__ import annotations

import json

import pytest
from leftover_support import USER, packed_output, use_system_temp, whole_manifest

from packtool import notes
from packtool.errors import PacktoolOutputError
from packtool.output import store
from packtool.output.store import StoreCommit, claim_store, clean_dead_runs, upload_proven
from packtool.slabs.format import ShardInfo
from packtool.slabs.names import PENDING_PREFIX, intent_file, shard_file
from packtool.storage import locate
from packtool.tokenize.checksum import SHARD_CHECKSUM, file_digest


class Killed(BaseException):
    """The kill: nothing after it runs (no abort, no clean)."""


def _staged(tmp_path, k: int, name: str) -> ShardInfo:
    local = tmp_path / f"staged-{k}"
    local.write_bytes(b"packtool's shard %d" % k)
    return ShardInfo(name, 0, 0, 0, local.stat().st_size, file_digest(str(local), SHARD_CHECKSUM), 0)


def _upload(commit, dests, tmp_path) -> list[ShardInfo]:
    infos = [_staged(tmp_path, k, d.name) for k, d in enumerate(dests)]
    for k, d in enumerate(dests):
        d.write_bytes((tmp_path / f"staged-{k}").read_bytes())
    return infos


def _local_before_commit(commit, tmp_path, monkeypatch):
    """The local engine (its shards staged first), killed between its uploads and the manifest put."""
    staged = [_staged(tmp_path, k, shard_file(k)) for k in range(2)]
    dests = commit.begin([s.file for s in staged], [{"bytes": s.bytes, SHARD_CHECKSUM: s.xxh3_128} for s in staged])
    _upload(commit, dests, tmp_path)
    return dests[0].name


def _ray_tasks(commit, tmp_path, upload=(0, 1)) -> list[ShardInfo]:
    """A Ray run: the intent names the shards before their sizes are known; each write task
    puts its shard's proof, then the shard (`upload`: the tasks that got that far)."""
    dests = commit.task_dests([shard_file(0), shard_file(1)])
    infos = [_staged(tmp_path, k, locate(d).name) for k, (d, _) in enumerate(dests)]
    for k, (d, proof) in enumerate(dests):
        if k in upload:
            upload_proven(str(tmp_path / f"staged-{k}"), d, proof, infos[k], commit.ticket())
        else:
            locate(proof).write_bytes(b'{"bytes": 1, "xxh3_128": "0"}')  # the proof put, the upload cut
    return infos


def _ray_before_commit(commit, tmp_path, monkeypatch):
    """Killed once every shard reported, just before the manifest put."""
    infos = _ray_tasks(commit, tmp_path)
    monkeypatch.setattr(commit.lease, "check", lambda: (_ for _ in ()).throw(Killed()))
    monkeypatch.setattr(store, "_forget", lambda *a: None)
    with pytest.raises(Killed):
        commit.finish(infos, whole_manifest([]))
    return infos[0].file


def _ray_uploading(commit, tmp_path, monkeypatch):
    """Killed while its tasks upload: one shard up, the other's proof put before its upload."""
    return _ray_tasks(commit, tmp_path, upload=(0,))[0].file


def _after_commit(commit, tmp_path, monkeypatch):
    """Killed after the manifest put, before the replaced shards were deleted."""
    infos = _ray_tasks(commit, tmp_path)
    monkeypatch.setattr(store, "_is_ours", lambda *a: (_ for _ in ()).throw(Killed()))
    with pytest.raises(Killed):
        commit.finish(infos, whole_manifest([]))
    return shard_file(0)  # the previous output's shard


def _older_intent(commit, tmp_path, monkeypatch):
    """An intent an older packtool put (no proofs): nothing it names can be proven."""
    dests = commit.begin([shard_file(0)])
    _upload(commit, dests, tmp_path)
    commit.intent.write_bytes(json.dumps({"new": [dests[0].name], "old": [shard_file(0)]}).encode())
    return dests[0].name


KINDS = {"uploaded, local engine": _local_before_commit, "uploaded, ray": _ray_before_commit,
         "ray, mid-upload": _ray_uploading, "replaced shard after the commit": _after_commit,
         "older intent without proofs": _older_intent}
PROVABLE = set(KINDS) - {"older intent without proofs"}


@pytest.mark.parametrize("whose", ["packtool's", "a user's put there after the kill"])
@pytest.mark.parametrize("kind", KINDS)
def test_the_next_run_deletes_a_dead_runs_leftover_only_on_its_recorded_proof(tmp_path, monkeypatch, kind, whose):
    use_system_temp(monkeypatch, tmp_path / "systmp")
    uri = "file://" + packed_output(tmp_path / "store", [shard_file(0)])
    loc = locate(uri)
    with pytest.raises(Killed), claim_store(uri, overwrite=True):
        commit = StoreCommit(uri)
        leftover = KINDS[kind](commit, tmp_path, monkeypatch)
        raise Killed()
    assert loc.join(intent_file(commit.run)).exists() and loc.join(leftover).exists()
    if whose != "packtool's":
        loc.join(leftover).write_bytes(USER)
    before, start = loc.join(leftover).read_bytes(), notes.mark()
    removed = clean_dead_runs(loc, uri)
    said = "\n".join(notes.since(start))
    assert not [n for n in loc.names() if n.startswith(PENDING_PREFIX)]  # the intent and the proofs
    if whose == "packtool's" and kind in PROVABLE:
        assert not loc.join(leftover).exists() and removed >= 1 and "removed" in said
        store.owned_objects(uri)  # all packtool's again: the next pack proceeds
        return
    assert loc.join(leftover).read_bytes() == before  # byte-identical, where it was
    assert f"kept {leftover}" in said and "not packtool's to delete" in said
    with pytest.raises(PacktoolOutputError, match=leftover):  # and the prefix is no longer packtool's alone
        store.owned_objects(uri)
