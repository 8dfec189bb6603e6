"""`--ray-address` of a cluster that does not answer (issue 23, S37-4): ray.init waited ~40 s
per attempt in native code, 20 attempts (~13 min), with Ray's `[... W ...]` lines on stderr
and Ctrl-C/SIGTERM landing only between attempts. Every kind of address where no Ray GCS
answers is now one line naming --ray-address, exit 2, within ray_join.JOIN_SECONDS, before
ray.init is handed it (ray.init is stood in for: a call with such an address is the hang),
and a stop while the address is asked lands at once, the asking child process gone."""
from __future__ import annotations

import http.server
import json
import os
import signal
import socket
import subprocess
import threading

import pytest

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'packtool[ray]')")

from cli_main import run_main  # noqa: E402
from conftest import LOCAL_RAY_GROUP  # noqa: E402

import packtool.engines.ray_join as ray_join  # noqa: E402
from packtool.output.folder import Terminated  # noqa: E402


class _Joined(BaseException):
    """ray.init reached with an address that did not answer: what hung ~13 minutes."""


@pytest.fixture
def no_join(monkeypatch):
    """ray.init stood in for; the addresses it was handed."""
    calls = []

    def init(*a, **k):
        calls.append(k.get("address"))
        raise _Joined(k.get("address"))
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray_join, "JOIN_SECONDS", 3.0)
    return calls


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


@pytest.fixture
def silent_listener():
    """Accepts connections (the kernel's backlog) and never says a word."""
    s = socket.socket()
    s.bind(("0.0.0.0", 0))
    s.listen(8)
    yield f"127.0.0.1:{s.getsockname()[1]}"
    s.close()


@pytest.fixture
def http_server():
    """Something else on the port (as Ray's dashboard, 8265, is)."""
    srv = http.server.ThreadingHTTPServer(("0.0.0.0", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


KINDS = ["refused", "no-such-name", "silent-listener", "http-server", "malformed"]


@pytest.fixture
def address(request):
    kind = request.param
    if kind == "refused":
        return f"127.0.0.1:{_free_port()}"
    if kind == "no-such-name":
        return "no-such-host.invalid:6379"
    if kind == "malformed":
        return "head-without-port"
    return request.getfixturevalue(kind.replace("-", "_"))


@pytest.mark.parametrize("via", ["--ray-address", "RAY_ADDRESS"])
@pytest.mark.parametrize("address", KINDS, indirect=True)
def test_an_address_where_no_gcs_answers_is_one_line_in_bounded_time(tmp_path, monkeypatch, capfd, no_join,
                                                                     address, via):
    """Given as the flag, or as Ray's own RAY_ADDRESS (`ray job submit` sets it), which ray.init
    joins when given no address (it refused the local start's num_cpus there)."""
    data = tmp_path / "ids.jsonl"
    data.write_text('{"input_ids":[1,2,3,4,5]}\n{"input_ids":[6,7,8]}\n')
    argv = ["--json", "pack", str(data), "-C", "64", "-q", "--engine", "ray",
            "-o", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "c")]
    if via == "RAY_ADDRESS":
        monkeypatch.setenv("RAY_ADDRESS", address)
    else:
        argv += ["--ray-address", address]
    assert run_main(monkeypatch, argv) == [2]
    out, err = capfd.readouterr()
    assert no_join == []  # never handed to ray.init
    e = json.loads(out)["error"]
    named = f"--ray-address {address}" if via != "RAY_ADDRESS" else f"environment variable RAY_ADDRESS={address}"
    assert e["kind"] == "config" and e["flag"] == (None if via == "RAY_ADDRESS" else via), e
    assert e["message"].startswith(f"{named}: could not join that Ray cluster ("), e
    assert "\n" not in e["message"] and "internal error" not in e["message"]
    assert not [x for x in err.splitlines() if x.startswith("[")], err  # Ray's native log lines
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("sig,raised", [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, Terminated)],
                         ids=["ctrl-c", "sigterm"])
def test_a_stop_while_the_address_is_asked_lands_at_once(monkeypatch, no_join, silent_listener, sig, raised):
    from packtool.engines.ray_engine import init_ray
    monkeypatch.setattr(ray_join, "JOIN_SECONDS", 600.0)  # the stop, not the deadline, ends it
    children = []
    popen = subprocess.Popen

    def asked(*a, **k):  # the child that asks the GCS: once it runs, the stop comes
        children.append(popen(*a, **k))
        threading.Timer(0.5, os.kill, (os.getpid(), sig)).start()
        return children[-1]
    monkeypatch.setattr(ray_join.subprocess, "Popen", asked)

    def stop(signum, frame):
        raise raised()
    old = signal.signal(sig, stop)
    try:
        with pytest.raises(raised):
            init_ray(silent_listener)
    finally:
        signal.signal(sig, old)
    assert no_join == [] and len(children) == 1
    assert children[0].poll() is not None  # killed with the question, not left asking



@pytest.mark.usefixtures("local_ray")
@LOCAL_RAY_GROUP
def test_a_running_cluster_answers(local_ray):
    """The question is the one ray.init asks: a live GCS (this worker's local Ray) passes it."""
    ray_join.check_answers(local_ray.get_runtime_context().gcs_address)
