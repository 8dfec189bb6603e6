"""A note said in a worker belongs to the process that started the work. Said inside verify's
process pool (packtool.workers) or a Ray task of `pack --engine ray`, it was printed by the
child (a Ray worker's stderr goes to Ray's logs, not the terminal) and never reached the
parent's NOTES, so `--json`'s `notes` and a library caller missed it. Every kind of worker a
note can be said in is a case: each note reaches the parent's NOTES exactly once and its stderr
once; a call that fails says its notes before its error."""
from __future__ import annotations

import json

import pytest
from conftest import LOCAL_RAY_GROUP
from typer.testing import CliRunner

from packtool import notes
from packtool.cli.app import app
from packtool.workers import process_pool, submit_all, thread_pool

RAY = [LOCAL_RAY_GROUP]  # one Ray with the other tests that use it (tests/conftest.py)


class SaidThenFailed(Exception):
    pass


def note_then_fail(message: str) -> None:  # run in a worker process: importable by name
    notes.note(message)
    raise SaidThenFailed(message)


def _thread_pool(tmp_path, request, monkeypatch):
    with thread_pool(2, "test-notes") as pool:
        list(pool.map(notes.note, ["thread 0", "thread 1"]))
    return ["thread 0", "thread 1"], None


def _process_pool(tmp_path, request, monkeypatch):  # verify's shard checks run here
    said = ["process 0", "process 1", "process 2"]
    assert [f.result() for f in submit_all(process_pool(2), notes.note, said)] == [None] * 3
    return said, None


def _process_pool_error(tmp_path, request, monkeypatch):
    [f] = submit_all(process_pool(2), note_then_fail, ["said before the error"])
    with pytest.raises(SaidThenFailed):
        f.result()
    return ["said before the error"], None


def _ray_task(tmp_path, request, monkeypatch):  # the plan shards, input digests, cache checks
    ray = request.getfixturevalue("local_ray")
    said = ["ray task 0", "ray task 1"]
    notes.listen_to_ray_workers()  # as pack_ray does, before its tasks and after
    ray.get([ray.remote(notes.note).remote(m) for m in said])
    notes.from_ray_workers()
    return said, None


def _ray_pack(tmp_path, request, monkeypatch):  # a tokenize task of `pack --engine ray --json`
    request.getfixturevalue("local_ray")
    from packtool.engines import ray_engine
    real = ray_engine.first_too_long

    def check_in_tasks(*a, **kw):  # what the tokenize tasks run on each batch, noting first
        early = real(*a, **kw)

        def check(lengths, bad, path, first_row):
            notes.note(f"tokenize task saw rows {first_row}..{first_row + len(lengths) - 1}")
            if early is not None:
                early(lengths, bad, path, first_row)
        return check

    monkeypatch.setattr(ray_engine, "first_too_long", check_in_tasks)
    data = tmp_path / "x.jsonl"
    data.write_text("".join(json.dumps({"input_ids": list(range(1, 2 + i))}) + "\n" for i in range(6)))
    r = CliRunner().invoke(app, ["pack", str(data), "--engine", "ray", "-C", "64", "-o", str(tmp_path / "out"),
                                 "--cache-dir", str(tmp_path / "cache"), "--json"])
    assert r.exit_code == 0, r.stdout + r.stderr
    got = json.loads(r.stdout)["notes"]
    said = [n for n in got if n.startswith("tokenize task saw rows")]
    assert said and len(said) == len(set(said)), got
    return said, r.stderr


KINDS = {"thread pool": _thread_pool, "process pool": _process_pool, "process pool, call fails": _process_pool_error,
         "ray task": pytest.param(_ray_task, marks=RAY), "ray pack": pytest.param(_ray_pack, marks=RAY)}


@pytest.mark.parametrize("kind", list(KINDS.values()), ids=list(KINDS))
def test_a_note_said_in_a_worker_is_the_parents_once(tmp_path, request, monkeypatch, capfd, kind):
    start = notes.mark()
    said, stderr = kind(tmp_path, request, monkeypatch)
    if stderr is None:
        stderr = capfd.readouterr().err
    kept = notes.since(start)
    for message in said:
        assert kept.count(message) == 1, (message, kept)
        assert stderr.count(f": {message}\n") == 1, (message, stderr)
