"""A `packtool` command line held at a stage, then stopped by a signal: the one helper of
tests/cli/test_interrupt_workers.py and test_no_tracebacks.py.

Run as a script (`held_run` does), it is the command held once where STAGE says, until the
test has sent its signal (or HOLD_SECONDS pass): the marker file appears when the hold begins,
and the test creates `<marker>.sent` once the signal is out. Imported, it is the test's side:
`held_run` starts it, sends the signal to the whole process group (a terminal's Ctrl-C, Slurm,
Kubernetes and `timeout` all do) or to the leader alone (`kill PID`), and returns how it ended.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HANG = 90  # seconds: a run still alive then is hung (the bug: forever)
WORDS = {signal.SIGINT: "interrupted (Ctrl-C)", signal.SIGTERM: "terminated (SIGTERM)"}

# stage -> (module, attribute path, hold before the call (else after it))
STAGES = {
    "start-up": ("packtool.cli.parsing", "reset", True),  # the CLI's modules loaded, flags not read
    "flags": ("packtool.cli.parsing", "Commands.make_context", True),
    "tokenize": ("packtool.packing", "tokenize_to_cache", True),
    "cache writes": ("packtool.tokenize.sink", "CacheSink.add", False),  # encode + cache writer threads
    "warm thread": ("packtool.tokenize.prefetch", "warm_compiled_code", False),  # numba's warm-up thread
    "write": ("packtool.packing", "write_manifest", True),
    "after the swap": ("packtool.packing", "swap_into_place", False),
    "shard writers": ("packtool.slabs.writer", "wait", True),  # shards being written by their threads
    "pool results": ("packtool.verification.run", "_done", True),  # between two results of the pool
    "ray": ("packtool.engines.ray_engine", "init_ray", False),  # a local Ray up, a task in flight
    "worker launch": ("multiprocessing.popen_forkserver", "Popen._launch", False),  # see _hold_launch
}


def _hold(marker: str, hold_s: float) -> None:
    if os.path.exists(marker):  # once: the signal ends the run at the first hold
        return
    open(marker, "w").close()
    end = time.monotonic() + hold_s
    while not os.path.exists(marker + ".sent") and time.monotonic() < end:
        time.sleep(0.005)


def _wrap(stage: str, marker: str, hold_s: float) -> None:
    import importlib
    module, path, before = STAGES[stage]
    owner = importlib.import_module(module)
    *outer, name = path.split(".")
    for part in outer:
        owner = getattr(owner, part)
    orig = getattr(owner, name)

    def held(*a, **k):
        if before:
            _hold(marker, hold_s)
        r = orig(*a, **k)
        if not before:
            _hold(marker, hold_s)
        return r

    if stage == "ray":  # the driver waiting in Ray's core worker (ray.get) for a task in flight
        def held(*a, **k):
            r = orig(*a, **k)
            import ray
            busy = ray.remote(lambda s: time.sleep(s))
            ref = busy.remote(hold_s)
            open(marker, "w").close()
            ray.get(ref)
            return r
    if stage == "worker launch":  # marked as the first launch begins (forkserver and first
        def held(*a, **k):        # worker starting), held once it is under way
            first = not os.path.exists(marker)
            open(marker, "a").close()
            r = orig(*a, **k)
            if first:
                _hold(marker + ".launch", hold_s)
            return r
    setattr(owner, name, held)
    if stage == "warm thread":  # the pipeline took its own reference at import
        import packtool.tokenize.pipeline as p
        p.warm_compiled_code = held


def child() -> None:
    # as a terminal's process: CI's xdist worker was seen holding SIGINT ignored or blocked
    # (cause not traced), and a child inherits both
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _wrap(os.environ["HOLD_STAGE"], os.environ["HOLD_MARKER"], float(os.environ["HOLD_SECONDS"]))
    sys.argv = ["packtool", *sys.argv[1:]]
    from packtool.cli import main
    main()


def startup_forks() -> None:
    """From sitecustomize (`started_stops`): while this `packtool` process starts, fork at each
    line packtool runs, from the first one after packtool/__init__.py holds the signals until
    the CLI's modules load (packtool/cli/app.py; from there main's own handling is tested by
    held stages). Each fork sends itself STARTUP_SIGNAL, and runs on with its stdout and
    stderr in files; its exit status is recorded. The interpreter's start-up before packtool's
    first line is out of packtool's reach, and so out of this test."""
    # as a terminal's process (see child()): a shell's background job, as CI may run `make test`,
    # starts with SIGINT ignored, and an ignored signal is inherited through exec
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    sigs = [int(s) for s in os.environ["STARTUP_SIGNALS"].split(",")]
    out = os.environ["STARTUP_OUT"]
    pkg = os.path.join(ROOT, "packtool") + os.sep
    app = os.path.join(pkg, "cli", "app.py")
    seen: list = []
    forked = []

    def trace(frame, event, arg):
        if forked or not frame.f_code.co_filename.startswith(pkg):
            return None
        if frame.f_code.co_filename == app:
            with open(os.path.join(out, "instants.json"), "w") as f:
                json.dump(seen, f)
            os._exit(0)
        if event == "line" and hasattr(sys.modules.get("packtool"), "_HELD"):
            where = f"{os.path.relpath(frame.f_code.co_filename, ROOT)}:{frame.f_lineno}"
            for sig in sigs:
                name = os.path.join(out, f"{len(seen)}")
                pid = os.fork()
                if pid == 0:
                    forked.append(pid)
                    for fd, ext in ((1, ".out"), (2, ".err")):
                        os.dup2(os.open(name + ext, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
                    os.kill(os.getpid(), sig)
                    return None
                seen.append([where, sig, os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])])
        return trace

    sys.settrace(trace)


# --- the test's side --------------------------------------------------------------------------

@dataclass
class Ended:
    pid: int  # the leader's: its group's and its session's id
    code: int
    out: str
    err: str
    held: list  # processes of its group while it was held
    left: list  # processes of its group still alive after it ended
    tmp: list  # what it left in its TMPDIR


def env(**extra) -> dict:
    e = dict(os.environ, PYTHONPATH=ROOT, **extra)
    e.pop("PACKTOOL_DEBUG", None)
    return e


def held_run(args: list, stage: str, tmp_path, sig=signal.SIGINT, group: bool = True,
             delay: float = 0.0, hold_s: float = 60.0, cwd=None) -> Ended:
    """Run `packtool ARGS` held at `stage`; `delay` s after the hold begins send `sig` to its
    process group (or its leader alone); return how it ended."""
    marker = str(tmp_path / f"held-{time.monotonic_ns()}")
    tmp = tempfile.mkdtemp(prefix="pt", dir="/tmp")  # short: sockets are made in it (AF_UNIX, 107 bytes)
    child = subprocess.Popen([sys.executable, os.path.abspath(__file__), *args], text=True,
                             env=env(HOLD_STAGE=stage, HOLD_MARKER=marker, HOLD_SECONDS=str(hold_s), TMPDIR=tmp),
                             cwd=str(cwd or tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
    try:
        while not os.path.exists(marker):
            if child.poll() is not None:
                raise AssertionError(f"{args[0]} ended before {stage!r}: {child.communicate()}")
            time.sleep(0.005)
        held = _group(child.pid)
        time.sleep(delay)
        (os.killpg if group else os.kill)(child.pid, sig)
        for m in (marker, marker + ".launch"):
            open(m + ".sent", "w").close()
        try:
            out, err = child.communicate(timeout=HANG)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{args[0]} hung after {sig.name} at {stage!r}") from None
        left = _left(child.pid)
        return Ended(child.pid, child.returncode, out, err, held, left, os.listdir(tmp))
    finally:
        for pgid in {child.pid, *(int(ln.split()[1]) for ln in _group(child.pid))}:
            try:
                os.killpg(pgid, signal.SIGKILL)  # its group, and any group a process of it made
            except (ProcessLookupError, PermissionError):
                pass
        shutil.rmtree(tmp, ignore_errors=True)


def _group(sid: int) -> list[str]:
    """The processes of the run's session (its group, and any group it made: a local Ray's),
    each as 'PID PGID COMMAND LINE'."""
    r = subprocess.run(["ps", "-ww", "-o", "pid=,pgid=,args=", "-s", str(sid)], capture_output=True, text=True)
    return [ln.strip() for ln in r.stdout.splitlines() if ln.strip()]


def _left(sid: int) -> list[str]:
    """The session's processes still alive a while after its leader ended (the forkserver and
    the resource tracker end when they see the leader's pipes close)."""
    for _ in range(100):
        left = _group(sid)
        if not left:
            return []
        time.sleep(0.1)
    return left


def started_stops(entry: list, args: list, tmp_path, sigs=(signal.SIGINT, signal.SIGTERM)) -> list:
    """Run `python ENTRY ARGS` under `startup_forks`: for each instant and signal, a tuple
    (file:line, signal, exit status, stdout, stderr) of the fork stopped there."""
    site, out = tmp_path / "site", tmp_path / "stops"
    site.mkdir()
    out.mkdir()
    (site / "sitecustomize.py").write_text("from _signal_child import startup_forks\nstartup_forks()\n")
    e = env(STARTUP_SIGNALS=",".join(str(int(s)) for s in sigs), STARTUP_OUT=str(out))
    e["PYTHONPATH"] = os.pathsep.join([str(site), os.path.dirname(os.path.abspath(__file__)), ROOT])
    r = subprocess.run([sys.executable, *entry, *args], env=e, cwd=str(tmp_path), capture_output=True,
                       text=True, timeout=HANG)
    assert r.returncode == 0 and (out / "instants.json").exists(), r.stderr
    instants = json.loads((out / "instants.json").read_text())
    return [(where, signal.Signals(sig), code, (out / f"{i}.out").read_text(), (out / f"{i}.err").read_text())
            for i, (where, sig, code) in enumerate(instants)]


# Ray's own: its notice at every start, its C++ log lines (a task in flight when the driver
# shut Ray down: 'task_manager.cc: Failed to push error to driver'), its session logs
RAY = (re.compile(r"Token authentication is enabled|\[\d{4}-\d\d-\d\d [\d:,]+ [EWI] \d+ \d+\] \w+\.cc:\d+:"), ["ray"])


def one_line(end: Ended, sig=signal.SIGINT, ray: bool = False) -> str:
    """The run stopped by `sig` the packtool way: its status, one `error:` line with the
    signal's words and nothing else on stderr (no traceback, no warning or note from any
    process: verify's 'process pool failed' when the group's signal ended its workers is not
    the cause), no process left behind, nothing left in its TMPDIR (with `ray`, Ray's own
    notice and logs). Returns the line."""
    others, logs = RAY if ray else (re.compile("(?!)"), [])
    assert "Traceback" not in end.err and "Exception in thread" not in end.err, end.err
    assert "leaked" not in end.err, end.err  # multiprocessing's resource tracker: a pool not stopped
    assert end.code == 128 + sig, (end.code, end.err)
    lines = [ln for ln in end.err.splitlines() if ln.strip() and not others.match(ln)]
    assert len(lines) == 1 and lines[0].startswith("error:") and WORDS[sig] in lines[0], end.err
    assert end.left == [], end.left
    assert [f for f in end.tmp if f not in logs] == [], end.tmp  # the forkserver's socket folder, spill files
    return lines[0]


if __name__ == "__main__":
    child()
