"""The tokenizer's encode threads (tokenize/prefetch.EncodePool): an error or Ctrl-C leaves
without waiting for a call still running (an encode_batch of long documents runs for seconds
in native code, and ThreadPoolExecutor joined it: Ctrl-C took 4-13 s to end a tokenizing
pack, stranger F22); a clean exit runs every submitted call; a queued call cancelled never runs."""
from __future__ import annotations

import threading

import pytest

from packtool.tokenize.prefetch import EncodePool


@pytest.mark.parametrize("error", [KeyboardInterrupt, ValueError])
def test_leaving_on_an_error_does_not_wait_for_a_running_call(error):
    release, started = threading.Event(), threading.Event()

    def long_call():
        started.set()
        return release.wait(30)  # a native encode: nothing interrupts it
    with pytest.raises(error):
        with EncodePool(2) as pool:
            running = pool.submit(long_call)
            queued = [pool.submit(long_call) for _ in range(3)]
            started.wait(30)
            for f in queued[1:]:
                f.cancel()
            raise error
    assert not running.done()  # the pool did not join it
    release.set()
    assert running.result(30) is True
    assert all(f.cancelled() for f in queued[1:])


def test_a_clean_exit_runs_every_call_and_raises_each_error_at_its_result():
    def fail():
        raise RuntimeError("bad chunk")
    with EncodePool(3) as pool:
        futs = [pool.submit(pow, i, 2) for i in range(20)]
        bad = pool.submit(fail)
    assert [f.result(0) for f in futs] == [i * i for i in range(20)]
    with pytest.raises(RuntimeError, match="bad chunk"):
        bad.result(0)
