"""`python -m packtool ARGS` as a fresh process, without paying its imports each time: a server
process imports the CLI (and the modules its commands import on the way, `preload`) once, then
forks one child per command line. Each child is the command line as a shell starts it: its own
fd 0/1/2 (stdout a pipe whose reader left, /dev/full, a file, or closed as with `>&-`, in which
case Python starts with `sys.stdout = None`, as here), `python -m packtool`'s argv and
`__main__`, the exit status the interpreter ends with after its own shutdown (stdout flushed at
exit), or the signal that ended it. A 5-15 s start-up (torch, megatron-core, numba) becomes a
fork: tests/cli/test_stdout_unwritable.py ran 51 command lines in ~4 min.

Run as a script it is the server: one JSON request a line on stdin, one reply a line on the fd
it was started with as stdout. Imported, `WarmCli` is the test's side."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class WarmCli:
    """The server; `run(args, stdout=...)` -> (exit status as subprocess gives it, stderr text)."""

    def __init__(self, preload=(), env=None):
        self._proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), *preload],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
        ready = self._proc.stdout.readline()
        assert ready.strip() == "ready", f"the warm CLI server did not start ({ready!r})"

    def run(self, args, stdout: str, timeout: float = 300) -> tuple[int, str]:
        """`stdout`: "gone-reader" (a pipe whose reader closed before the first byte), "dev-full",
        "closed", or a file path."""
        with tempfile.NamedTemporaryFile("w+", suffix=".stderr") as err:
            self._proc.stdin.write(json.dumps({"args": list(args), "stdout": stdout, "stderr": err.name,
                                               "timeout": timeout}) + "\n")
            self._proc.stdin.flush()
            reply = self._proc.stdout.readline()
            assert reply, "the warm CLI server died"
            got = json.loads(reply)
            said = open(err.name, errors="replace").read()
            assert not got["timed_out"], f"packtool {' '.join(args)} still ran after {timeout} s: {said}"
            return got["status"], said

    def close(self) -> None:
        self._proc.kill()  # idle between requests, nothing of its own to flush: its shutdown took ~7 s
        self._proc.wait(timeout=60)
        self._proc.stdin.close()
        self._proc.stdout.close()


def _child(req: dict) -> None:
    """In the forked child: the fds a shell would give, then `python -m packtool ARGS`."""
    import runpy
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    err = os.open(req["stderr"], os.O_WRONLY | os.O_TRUNC)
    os.dup2(err, 2)
    where = req["stdout"]
    if where == "closed":
        os.close(1)
        sys.stdout = sys.__stdout__ = None  # what Python starts with when fd 1 is not open
    else:
        if where == "gone-reader":
            r, target = os.pipe()
            os.close(r)
        else:
            target = os.open("/dev/full" if where == "dev-full" else where, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(target, 1)
    sys.argv = [os.path.join(ROOT, "packtool", "__main__.py"), *req["args"]]
    runpy.run_module("packtool", run_name="__main__", alter_sys=True)
    sys.exit(0)  # the interpreter's own end: SystemExit(code) from the CLI, or 0


def _serve() -> None:
    sys.path[0] = os.getcwd()  # as `python -m` has it, not this file's folder
    for name in sys.argv[1:]:
        try:
            __import__(name)
        except ImportError:  # an extra not installed: the command line meets it as a cold one would
            pass
    sys.stdout.flush()
    reply_fd = os.dup(1)  # the replies' fd; a child's fd 1 is its command line's stdout
    os.write(reply_fd, b"ready\n")
    for line in sys.stdin:
        req = json.loads(line)
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.close(reply_fd)
            _child(req)  # never returns: SystemExit ends the child's interpreter
        os.write(reply_fd, (json.dumps(_wait(pid, req["timeout"])) + "\n").encode())


def _wait(pid: int, timeout: float) -> dict:
    """The child's exit status; killed, and said so, when it outlives `timeout` (a hang)."""
    import signal
    import time
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return {"status": os.waitstatus_to_exitcode(status), "timed_out": False}
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return {"status": None, "timed_out": True}
        time.sleep(0.02)


if __name__ == "__main__":
    _serve()
