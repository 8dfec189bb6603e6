"""packtool's one owner of notes: a line about something it did on its own or the user should
know (a cache rebuilt, columns not read, leftovers removed, a flag without effect). Each is said
once on stderr (stdout stays for tables and --json) and kept in `NOTES`, where a library caller
reads them and the CLI puts those of its command into the --json object (`since`).

A note said in a worker process belongs to the process that started the work: there the user
reads stderr and the --json object. So a worker says nothing itself and its notes travel to the
parent, which says each once: a process-pool call's with its result or error (`held`, then
`heard`; packtool.workers does both), a Ray task's through the cluster's key-value store under
its driver's job, said by the driver when its Ray work ends (`listen_to_ray_workers`, then
`from_ray_workers`).
"""
from __future__ import annotations

import itertools
import json
import os
import sys
import time

from packtool.errors import shown

NOTES: list[str] = []  # every note said in this process, in order
_HELD: list | None = None  # inside `held`: the (message, label) pairs for the parent to say
_RAY_KEYS = "packtool-notes/"  # + job id + "/" + a key that sorts in the order said
_RAY_SEQ = itertools.count()


def note(message: str, label: str = "packtool") -> None:
    """Say `message` on stderr as `<label>: <message>` and keep it (in a worker: for the parent)."""
    if _HELD is not None:
        _HELD.append((message, label))
    elif not _to_ray_driver(message, label):
        _say(message, label)


def job_note(message: str, rank: int | None, label: str = "packtool") -> None:
    """A note on the whole data-parallel job, one its every rank would say alike (how the slabs
    are dealt to the ranks): said by rank 0, whose log the user reads, not once per rank (a run of
    N ranks printed it N times). `rank`: this process's rank in the job; None: this process deals
    for every rank, and says it."""
    if not rank:
        note(message, label)


def _say(message: str, label: str) -> None:
    NOTES.append(message)  # exact, for a library caller and --json
    try:  # its control characters escaped (errors.shown): one line, and a file name is no terminal command
        sys.stderr.write(f"{label}: {shown(message)}\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed: the note is still kept for --json
        pass


def mark() -> int:
    """Where the notes of what starts now begin (give it to `since`)."""
    return len(NOTES)


def since(start: int) -> list[str]:
    """The notes said from `start` (a `mark`) on."""
    return list(NOTES[start:])


# --- notes of worker processes ----------------------------------------------------------

def held(fn, *args):
    """`(fn(*args), the notes it said)`, in a worker process: they are not said here. When `fn`
    raises, its error carries them (`packtool_notes`), so the parent says them before the error."""
    global _HELD
    before, _HELD = _HELD, []
    try:
        return fn(*args), _HELD
    except BaseException as e:
        try:
            e.packtool_notes = _HELD
        except AttributeError:  # an error without attributes: its notes go with it
            pass
        raise
    finally:
        _HELD = before


def heard(said=(), error: BaseException | None = None) -> None:
    """Say here, once, the notes a worker kept: `held`'s list, or those its `error` carries."""
    for message, label in [*said, *(getattr(error, "packtool_notes", None) or ())]:
        _say(message, label)


def _ray_job(ray) -> str | None:
    """The job of the Ray driver this process works for; None unless it is a Ray worker."""
    try:
        if not ray.is_initialized():
            return None
        ctx = ray.get_runtime_context()
        return ctx.get_job_id() if ctx.worker.mode == ray.WORKER_MODE else None
    except Exception:  # an older or half-started Ray: say the note here
        return None


def _to_ray_driver(message: str, label: str) -> bool:
    """In a Ray worker whose driver listens (`listen_to_ray_workers`): keep the note for it.
    False: say it here (not a Ray worker, or one of a job that is not packtool's, whose driver
    shows its workers' stderr itself)."""
    ray = sys.modules.get("ray")  # a process that never loaded Ray is no Ray worker
    job = _ray_job(ray) if ray is not None else None
    if job is None:
        return False
    from ray.experimental.internal_kv import _internal_kv_exists, _internal_kv_put
    if not _internal_kv_exists(f"{_RAY_KEYS}{job}"):
        return False
    _internal_kv_put(f"{_RAY_KEYS}{job}/{time.time_ns():020d}-{os.getpid()}-{next(_RAY_SEQ):06d}",
                     json.dumps([message, label]).encode())
    return True


def listen_to_ray_workers() -> None:
    """On a Ray driver: from now on its job's workers keep their notes for `from_ray_workers`."""
    import ray
    from ray.experimental.internal_kv import _internal_kv_put
    _internal_kv_put(f"{_RAY_KEYS}{ray.get_runtime_context().get_job_id()}", b"1")


def from_ray_workers() -> None:
    """On a Ray driver: say the notes its workers kept, in the order said, each once (a note is
    said only by the caller that deleted its key)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return
    from ray.experimental.internal_kv import _internal_kv_del, _internal_kv_get, _internal_kv_list
    prefix = f"{_RAY_KEYS}{ray.get_runtime_context().get_job_id()}/"
    try:
        keys = sorted(_internal_kv_list(prefix))
    except Exception as e:  # the cluster is gone (the error that ended the run says why)
        _say(f"the notes of the Ray tasks could not be read ({type(e).__name__})", "packtool")
        return
    for key in keys:
        raw = _internal_kv_get(key)
        if raw is not None and _internal_kv_del(key):
            _say(*json.loads(raw))


__all__ = ["NOTES", "from_ray_workers", "heard", "held", "listen_to_ray_workers", "mark", "note", "since"]
