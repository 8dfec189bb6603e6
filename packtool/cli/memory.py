"""The line a MemoryError ends a command with: which command ran out, in which stage (the
deepest packtool package in the traceback, the worker's error chain included), on which input,
and the flags that lower that stage's memory in that command, or that none does (then what
does). A generic "try --workers 1" named flags that half the commands lack and that change
nothing while tokenizing."""
from __future__ import annotations

from packtool.errors import shown
from packtool.threads import limit_words, native_panic, thread_line, thread_refused

# packtool package -> the stage, as said in the line
_STAGE = {"tokenize": "tokenizing", "planning": "planning", "packers": "planning", "slabs": "slabs",
          "output": "writing", "verification": "checking", "inspection": "inspecting", "megatron": "training on"}

_JSON_ARRAY = ("one read block and a few encode chunks per input are held, so the likely cause is what is held "
               "whole: a .json array file (convert it to JSON Lines) or a single row of hundreds of MiB")
# (command, stage) -> what lowers the memory; (command, None): any other or an unknown stage
_ADVICE = {
    ("pack", "tokenizing"): f"no pack flag lowers tokenizing's memory: {_JSON_ARRAY}",
    ("pack", "planning"): "plan in smaller row shards (--plan-shard-rows, e.g. 1000000; 0 plans every row at once) "
                          "or give a smaller -C (the planner's tables grow with it)",
    ("pack", "slabs"): "write with fewer threads (--workers 1: each holds one slab) or give a smaller -C",
    ("pack", None): "try --workers 1 (each writer thread holds one slab) and a smaller --plan-shard-rows",
    ("plan", None): "plan holds every length and its plan in memory and no plan flag lowers that: plan a part of "
                    "the lengths, or pack the data itself with --plan-shard-rows (planned in row shards)",
    ("inspect", None): "inspect holds the lengths (or the output's per-slab figures) and a plan of them in memory "
                       "and no inspect flag lowers that (--compare and --what-if plan again, one plan at a time): "
                       "inspect a part of the lengths",
    ("verify", "tokenizing"): f"no verify flag lowers the tokenized --source copy's memory: {_JSON_ARRAY}",
    ("verify", None): "check with fewer processes (--workers 1: each reads its own shards' row groups)",
    ("train", None): "give a smaller --micro-batch-tokens, or a smaller model (--layers, --hidden, --ffn, --config)",
}
# the advice of each entry above that names --workers 1, for a run that has one worker already (the
# flag given, or one core its default resolves to): never the fix already in force (RB-1)
_AT_ONE_WORKER = {
    ("pack", "slabs"): "it writes with one thread already (--workers 1): give a smaller -C",
    ("pack", None): "it writes with one thread already (--workers 1): try a smaller --plan-shard-rows",
    ("verify", None): "it runs one process already (--workers 1) and no verify flag reads a row group in less",
}


def stage_of(e: BaseException) -> str | None:
    """The stage of the deepest packtool frame of `e`'s traceback, else of its cause's."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        found, tb = None, e.__traceback__
        while tb is not None:
            parts = str(tb.tb_frame.f_globals.get("__name__", "")).split(".")
            if parts[0] == "packtool" and len(parts) > 1 and parts[1] in _STAGE:
                found = _STAGE[parts[1]]
            tb = tb.tb_next
        if found:
            return found
        e = e.__cause__ or e.__context__
    return None


def _some(paths) -> str:
    paths = [str(p) for p in (paths or []) if p is not None]
    if not paths:
        return ""
    return shown(paths[0]) + (f" and {len(paths) - 1} more" if len(paths) > 1 else "")


def _input(command: str, args: dict, stage: str | None) -> str:
    if command == "pack":
        return _some(args.get("inputs"))
    if command == "plan":
        return f"--lengths {_some([args.get('lengths')])}"
    if command == "inspect":
        for key, flag in (("directory", ""), ("lengths", "--lengths "), ("plan_file", "--plan ")):
            if args.get(key):
                return flag + _some([args[key]])
    if command == "verify":
        if stage == "tokenizing" and args.get("source"):
            return f"--source {_some(args['source'])}"
        return _some([args.get("directory")])
    if command == "train":
        return _some([args.get("data_dir")])
    return ""


def _where(command: str, args: dict, stage: str | None) -> str:
    what = _input(command, args, stage)
    doing = {"slabs": "writing the slabs of" if command == "pack" else "reading the slabs of",
             "planning": "planning the slabs of" if command == "pack" else "planning"}.get(stage, stage)
    return f" while {doing} {what}" if doing else f" on {what}" if what else ""


def out_of_memory(e: BaseException, command: str | None, args: dict) -> str:
    """The one line for a MemoryError of `command` (its typer arguments `args`)."""
    stage = stage_of(e)
    if command not in {c for c, _ in _ADVICE}:
        return "out of memory" + (f" while {stage}" if stage else "") + "; give packtool more memory"
    from packtool.free_memory import DecodeOutOfMemory
    if isinstance(e, DecodeOutOfMemory) and stage == "tokenizing":  # an input's own line ("here") names its cause and fix
        return f"out of memory in `packtool {command}`{_where(command, args, stage)}"
    key = (command, stage) if (command, stage) in _ADVICE else (command, None)
    advice = _ADVICE[key]
    if key in _AT_ONE_WORKER and _one_worker(e, args):
        advice = _AT_ONE_WORKER[key]
    return f"out of memory in `packtool {command}`{_where(command, args, stage)}: {advice}"


def _one_worker(e: BaseException, args: dict) -> bool:
    """The run had one worker: the count its pool recorded (workers.running: min(shards or
    pieces, --workers)), else --workers as pack and verify resolve it (unset: one per core)."""
    from packtool.workers import cores, workers_run
    n = workers_run(e)
    return (n if n is not None else args.get("workers") or cores()) == 1


def threads_refused(e: BaseException, command: str | None, args: dict) -> str:
    """The one line for `thread_refused(e)` in `command`: where, the limit that refused it and the fix
    (threads.thread_line, the library's ThreadRefused's own words, with the command's place)."""
    where = _where(command, args, stage_of(e)) if command else ""
    return thread_line(e, f" in `packtool {command}`{where}" if command else " here")


def blas_refused(e: BaseException) -> bool:
    """A KeyboardInterrupt that numpy's OpenBLAS raised on itself: a thread of its pool was refused
    while numpy loaded, and it raise()s SIGINT (blas_server.c), which Python takes for the user's
    Ctrl-C. Told by where it landed (numpy's import, its innermost frame) and by threads that
    will not start now, as many as OpenBLAS asked for; a Ctrl-C there with threads to spare is one."""
    import os
    import threading
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None or not str(tb.tb_frame.f_globals.get("__name__", "")).startswith("numpy"):
        return False
    wanted = next((os.environ[v] for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS") if os.environ.get(v)), "")
    # ASCII digits, bounded: int() refuses `²` (isdigit admits it) and 4,300+ digits, here inside an error's handling
    n = int(wanted) if wanted.isascii() and wanted.isdigit() and len(wanted) <= 6 else len(os.sched_getaffinity(0))
    stop, started = threading.Event(), []
    try:
        for _ in range(max(1, min(n, 64) - 1)):  # its workers: one per core less the caller's
            started.append(threading.Thread(target=stop.wait, daemon=True))
            started[-1].start()
        return False
    except RuntimeError:  # "can't start new thread"
        return True
    finally:
        stop.set()
        for t in started:
            if t.ident is not None:
                t.join()


def blas_threads_refused() -> str:
    """The one line for `blas_refused`: the limit that refused OpenBLAS's threads and the fix."""
    return ("could not start a thread while packtool was starting (numpy's OpenBLAS thread pool); "
            + limit_words(False, "or run fewer threads (OPENBLAS_NUM_THREADS=1 for numpy's pool)"))


__all__ = ["blas_refused", "blas_threads_refused", "native_panic", "out_of_memory", "stage_of", "thread_refused", "threads_refused"]
