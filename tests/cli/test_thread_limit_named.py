"""RB-2: a thread the system would not start was said as "the memory limit (N KiB, ulimit -v) has no
room for another thread's stack" whenever an address-space or data-size limit was set: a ulimit -d
limit named as -v, and a refusal by the thread or pids limit (many clusters set a large ulimit -v)
blamed on memory, with no word of ulimit -u. Each limit is now named by its own flag, from
free_memory's one table, and one the process is far below is said not to be the cause."""
from __future__ import annotations

import resource

import pytest

from packtool.cli.memory import threads_refused
from packtool.free_memory import memory_limits

PanicException = type("PanicException", (BaseException,), {"__module__": "pyo3_runtime"})
FAILURES = {"thread not started": lambda: RuntimeError("can't start new thread"),
            "tokenizer pool panic": lambda: PanicException(
                "The global thread pool has not been initialized.: ThreadPoolBuildError { kind: IOError(Os { code: "
                "11, kind: WouldBlock, message: \"Resource temporarily unavailable\" }) }")}
LIMITS = {"ulimit -v": resource.RLIMIT_AS, "ulimit -d": resource.RLIMIT_DATA}


def _limit(monkeypatch, which: int | None, soft) -> None:
    """Only `which` set, at `soft(what the process counts against it now)`."""
    real, value = resource.getrlimit, {}
    monkeypatch.setattr(resource, "getrlimit", lambda r: (value.get(r, resource.RLIM_INFINITY), resource.RLIM_INFINITY)
                        if r in LIMITS.values() else real(r))
    if which is not None:
        value[which] = 1 << 60  # set, so that memory_limits reads what the process counts against it
        value[which] = soft(memory_limits()[0][3])


def _line(failure: str) -> str:
    return threads_refused(FAILURES[failure](), "pack", {"inputs": ["d.jsonl"]})


@pytest.mark.parametrize("failure", FAILURES)
@pytest.mark.parametrize("flag", LIMITS)
def test_a_memory_limit_without_room_is_named_by_its_own_flag(monkeypatch, flag, failure):
    _limit(monkeypatch, LIMITS[flag], lambda used: used)  # not one more stack fits
    line = _line(failure)
    other = next(f for f in LIMITS if f != flag)
    assert f"{flag}) has no room for another thread's stack" in line and other not in line, line
    assert "ulimit -u" not in line, line


@pytest.mark.parametrize("failure", FAILURES)
@pytest.mark.parametrize("flag", LIMITS)
def test_a_memory_limit_far_above_use_names_the_thread_limit(monkeypatch, flag, failure):
    _limit(monkeypatch, LIMITS[flag], lambda used: used + (1 << 40))
    line = _line(failure)
    assert "no more threads (ulimit -u" in line and "no room" not in line, line
    assert f"({flag}) is not what refused it" in line, line


@pytest.mark.parametrize("failure", FAILURES)
def test_no_memory_limit_names_the_thread_limit(monkeypatch, failure):
    _limit(monkeypatch, None, None)
    line = _line(failure)
    assert "no more threads (ulimit -u" in line and "ulimit -v" not in line and "ulimit -d" not in line, line
