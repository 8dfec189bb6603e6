"""The Ray address comes from `--ray-address` (pack_ray's `ray_address`) or Ray's own RAY_ADDRESS,
and Ray rewrites some of it (S38-6). Every source x every kind of value the line got wrong:
- a blank RAY_ADDRESS (a job script's `export RAY_ADDRESS=" $HEAD"` with HEAD unset) was
  blamed on "the local Ray node did not start", flag --engine, pointing at Ray's logs;
- a blank `--ray-address` was "could not join" an empty address;
- a padded RAY_ADDRESS (`" local "`, `" auto "`) was stripped by packtool and re-read as is by
  ray.init ("Invalid address format"), and the local start handed ray.init no address, so
  Ray could join a cluster `ray start` left here instead;
- a loopback address (127.0.0.1, localhost, [::1]) is asked by Ray at this machine's address:
  the line named only that one, an address the user never typed.
Ray's join and start are stood in for (ray.init records what Ray would read and stops)."""
from __future__ import annotations

import json
import os
import socket

import pytest

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'packtool[ray]')")

from cli_main import run_main  # noqa: E402

import packtool.engines.ray_join as ray_join  # noqa: E402
from packtool.errors import PacktoolError  # noqa: E402


class _Reached(BaseException):
    """ray.init reached: the address Ray itself would read then."""


@pytest.fixture
def reached(monkeypatch):
    """ray.init stood in for; what it would join, read as Ray reads it (worker.init: RAY_ADDRESS
    replaces an address of None or 'auto' when it is set)."""
    seen = []

    def init(*a, address=None, **k):
        env = os.environ.get("RAY_ADDRESS")
        seen.append(env if env and address in (None, "auto") else address)
        raise _Reached()
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return seen


def _argv(tmp_path, *extra):
    data = tmp_path / "ids.jsonl"
    data.write_text('{"input_ids":[1,2,3,4,5]}\n{"input_ids":[6,7,8]}\n')
    return ["--json", "pack", str(data), "-C", "64", "-q", "--engine", "ray",
            "-o", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "c"), *extra]


def _error(monkeypatch, capfd, argv) -> dict:
    assert run_main(monkeypatch, argv) == [2]
    out, err = capfd.readouterr()
    e = json.loads(out)["error"]
    assert err.splitlines() == [f"error: {e['message']}"], err  # the one line, no Ray log, no traceback
    return e


BLANKS = {"empty": "", "space": " ", "tab": "\t", "space-newline": " \n"}


@pytest.mark.parametrize("value", BLANKS.values(), ids=BLANKS.keys())
def test_a_blank_ray_address_flag_is_refused_naming_it(tmp_path, monkeypatch, capfd, reached, value):
    e = _error(monkeypatch, capfd, _argv(tmp_path, "--ray-address", value))
    assert e["flag"] == "--ray-address" and e["message"].startswith("--ray-address is "), e
    assert "HOST:PORT" in e["message"] and "\n" not in e["message"], e
    assert reached == [] and not (tmp_path / "out").exists() and not (tmp_path / "c").exists()


@pytest.mark.parametrize("value", [v for v in BLANKS.values() if v], ids=[k for k, v in BLANKS.items() if v])
def test_a_blank_ray_address_variable_is_named(tmp_path, monkeypatch, capfd, reached, value):
    monkeypatch.setenv("RAY_ADDRESS", value)
    e = _error(monkeypatch, capfd, _argv(tmp_path))
    assert e["kind"] == "config" and e["flag"] is None, e
    assert e["message"].startswith(f"environment variable RAY_ADDRESS={value!r}: not a Ray address (blank)"), e
    assert "local Ray node did not start" not in e["message"] and "\n" not in e["message"], e
    assert reached == [] and not (tmp_path / "out").exists()


def test_the_library_refuses_a_blank_ray_address(tmp_path, reached):
    from packtool.engines.ray_engine import pack_ray
    with pytest.raises(PacktoolError, match=r"^ray_address is blank \(' '\); give HOST:PORT"):
        pack_ray([str(tmp_path / "x.jsonl")], output=str(tmp_path / "o"), ray_address=" ")
    assert reached == []


# RAY_ADDRESS as set -> what ray.init must read: what packtool chose (stripped; local: "local")
CHOSEN = {"unset": (None, "local"), "empty": ("", "local"), "local": ("local", "local"),
          "padded-local": (" local ", "local"), "padded-auto": (" auto ", "auto")}


@pytest.mark.parametrize("env", CHOSEN, ids=CHOSEN.keys())
def test_ray_reads_the_address_packtool_chose(tmp_path, monkeypatch, reached, env):
    value, want = CHOSEN[env]
    if value is not None:
        monkeypatch.setenv("RAY_ADDRESS", value)
    monkeypatch.setattr(ray_join, "check_answers", lambda address: None)  # asked for real below
    with pytest.raises(_Reached):
        from packtool.engines.ray_engine import init_ray
        init_ray()
    assert reached == [want]
    assert os.environ.get("RAY_ADDRESS") == value  # the caller's environment, as it was


def _node_ip() -> str:
    from ray._private import services
    ip = services.get_node_ip_address()
    if services.is_localhost(ip):
        pytest.skip("this machine's address is a loopback one: Ray rewrites nothing")
    return ip


@pytest.fixture
def loopback_only():
    """Something listening on 127.0.0.1 alone (a head started with --node-ip-address 127.0.0.1)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    yield s.getsockname()[1]
    s.close()


@pytest.mark.parametrize("via", ["--ray-address", "RAY_ADDRESS"])
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]"])
def test_a_loopback_address_is_said_with_the_address_ray_asks(tmp_path, monkeypatch, capfd, reached,
                                                              loopback_only, host, via):
    ip = _node_ip()
    address = f"{host}:{loopback_only}"
    if via == "RAY_ADDRESS":
        monkeypatch.setenv("RAY_ADDRESS", address)
    e = _error(monkeypatch, capfd, _argv(tmp_path, *(["--ray-address", address] if via != "RAY_ADDRESS" else [])))
    why = e["message"].split(": could not join that Ray cluster (", 1)[1]
    assert why.startswith(f"ConnectionRefusedError: {address} (Ray connects to this machine's address "
                          f"{ip}:{loopback_only} for it) refused the connection: nothing listens there"), e
    assert f"--node-ip-address {ip}" in why and "\n" not in e["message"], e
    assert reached == [] and not (tmp_path / "out").exists()


def test_the_finding(tmp_path, monkeypatch, capfd, reached):
    """S38-6 as filed: RAY_ADDRESS=' ' named, not the local node."""
    monkeypatch.setenv("RAY_ADDRESS", " ")
    e = _error(monkeypatch, capfd, _argv(tmp_path, "--dry-run"))
    assert e["message"] == "environment variable RAY_ADDRESS=' ': not a Ray address (blank); unset it, or give HOST:PORT"
