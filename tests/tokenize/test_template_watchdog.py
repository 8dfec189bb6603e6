"""A chat template stopped by its time bound leaves the process as it found it. The watchdog
raises its timeout into the rendering thread (PyThreadState_SetAsyncExc); clearing it afterwards
with a NULL exception left CPython's "async exception pending" flag up for good, and under a
profile or trace function (cProfile, coverage, a debugger, a test's sys.setprofile) Python 3.11
then re-checks it at a call's entry forever: the next profiled call, anywhere in the process,
spun at 100% CPU. It hung a pytest worker minutes after tests/cli/test_bad_inputs.py's
never-ending template, in tests/slabs/test_reader_reads.py's profiled Megatron epoch."""
from __future__ import annotations

import ctypes
import sys
import threading

import jinja2
import pytest

import packtool.tokenize.template_limits as limits
from packtool.tokenize.templates import Renderer, make_template

ENDLESS = ("{% set ns = namespace(n=0) %}{% for a in range(1000000) %}{% for b in range(1000000) %}"
           "{% set ns.n = ns.n + 1 %}{% endfor %}{% endfor %}{{ ns.n }}")


class _Stuck(BaseException):
    """Raised into a spinning probe thread to end it (the async exception lands where it spins)."""


def _probed_call_returns(hook: str) -> bool:
    """A call under a `hook` (sys.setprofile / sys.settrace) function, in a fresh thread, returns;
    a thread that spins is ended by an async exception, so a failure leaves nothing behind."""
    def probe() -> None:
        getattr(sys, hook)(lambda *a: None)
        try:
            len([])
            (lambda: None)()
        finally:
            getattr(sys, hook)(None)

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(30)  # the call takes microseconds; only a spinning one is still there
    if not t.is_alive():
        return True
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(t.ident), ctypes.py_object(_Stuck))
    t.join()
    return False


def _render_until_stopped() -> str:
    r = Renderer(make_template("endless.jinja", ENDLESS), {})
    with pytest.raises(jinja2.exceptions.TemplateError) as e:
        r.render([{"role": "user", "content": "hi"}])
    return str(e.value)


@pytest.mark.parametrize("hook", ["setprofile", "settrace"])
@pytest.mark.parametrize("where", ["caller", "helper thread"])
def test_a_stopped_template_leaves_no_pending_flag(monkeypatch, hook, where):
    """Rendered in the caller's thread or in a helper thread (the tokenizer's encode pool), the
    timeout is said and a later profiled or traced call still returns."""
    monkeypatch.setattr(limits, "RENDER_SECONDS", 0.2)
    monkeypatch.setattr(limits, "MAX_RANGE_ITEMS", 10**15)  # the time bound stops it, not range()'s
    said: list[str] = []
    if where == "caller":
        said.append(_render_until_stopped())
    else:
        t = threading.Thread(target=lambda: said.append(_render_until_stopped()))
        t.start()
        t.join()
    assert said and "took over 0.2 s" in said[0], said
    assert _probed_call_returns(hook), f"a call under sys.{hook} spun after a template timeout"


@pytest.mark.parametrize("bad", ["abc", "-5", "nan", "0"])
def test_a_bad_value_in_the_environment_for_a_while_does_not_stop_the_watchdog(monkeypatch, bad):
    """The watchdog thread read PACKTOOL_TEMPLATE_SECONDS itself on every tick: a process whose
    environment held a bad value for one tick (a test's CliRunner env=, a library user's own
    os.environ) lost the thread without a word, and every later endless template hung (a CI
    worker at 100% CPU for minutes, in the test above). The value is read by the rendering."""
    monkeypatch.setattr(limits, "MAX_RANGE_ITEMS", 10**15)
    monkeypatch.setattr(limits, "RENDER_SECONDS", None)
    monkeypatch.setenv("PACKTOOL_TEMPLATE_SECONDS", "0.2")
    assert "took over 0.2 s" in _render_until_stopped()  # the thread runs
    monkeypatch.setenv("PACKTOOL_TEMPLATE_SECONDS", bad)
    import time
    time.sleep(0.6)  # several of the thread's ticks under the bad value
    monkeypatch.setenv("PACKTOOL_TEMPLATE_SECONDS", "0.2")
    said: list[str] = []
    t = threading.Thread(target=lambda: said.append(_render_until_stopped()), daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive() and said and "took over 0.2 s" in said[0], "the watchdog stopped"
