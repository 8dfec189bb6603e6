"""`packtool.cli.main` run in-process, ending where the process would: `cli._leave` itself
would stop this worker's pools and run pytest's atexit handlers, so a stand-in records the
exit code and raises instead. Shared by the tests of the command's ends."""
from __future__ import annotations

import sys

import pytest


class _Left(Exception):
    pass


def run_main(monkeypatch, argv: list[str]) -> list[int]:
    """The exit codes `cli._leave` was called with while `packtool ARGV` ran (one, normally)."""
    import packtool.cli as cli
    import packtool.cli.failure as failure
    ended = []

    def leave(c):
        ended.append(c)
        raise _Left

    monkeypatch.setattr(cli, "_leave", leave)
    # main marks the process as the command's own (keep_committed): not this test worker
    monkeypatch.setitem(failure._STATE, "process", failure._STATE.get("process", False))
    monkeypatch.setattr(sys, "argv", ["packtool", *argv])
    with pytest.raises(_Left):
        cli.main()
    return ended


def raiser(module: str, make=MemoryError):
    """A function whose frame is `module`'s, raising `make()`: the stage a failure is in, as the
    CLI tells it from the traceback's deepest packtool module."""
    ns = {"__name__": module, "make": make}
    exec("def boom(*args, **kwargs):\n    raise make()\n", ns)
    return ns["boom"]
