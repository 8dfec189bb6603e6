"""S38-8: `pack --engine ray -q` printed Ray's "Token authentication is enabled for this Ray
cluster. Set RAY_AUTH_MODE=disabled to opt out ..." on stderr, also with --json (not in its
notes): Ray's advisory about its default, for a node only this run used, in every quiet run's
log. Every ray.init packtool makes that says it (a local start; a join with `auto`, from the
flag or RAY_ADDRESS, when a token is found) says it no more; Ray's other warnings there are
kept; the setting stays Ray's. Ray's init is stood in for by what it does there: it calls
its own advisory (authentication_token_setup) and stops; the finding runs a real local Ray."""
from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'packtool[ray]')")

from conftest import GPT2, GSM8K, LOCAL_RAY_GROUP, ROOT  # noqa: E402

import packtool.engines.ray_join as ray_join  # noqa: E402
from packtool.engines.ray_engine import init_ray  # noqa: E402

setup = pytest.importorskip("ray._private.authentication.authentication_token_setup",
                            reason="a Ray without token authentication")
OTHER = "Ray's other warning, kept"


class _Reached(BaseException):
    pass


@pytest.fixture
def ray_init(monkeypatch):
    """ray.init as Ray 2.60's says its advisory (worker.init): a new local node always, a join
    with no address or `auto` when a token is found; then another warning of that logger."""
    def init(*a, address=None, **k):
        monkeypatch.setattr(logging.getLogger("ray"), "handlers", [])  # ray.init's, with configure_logging=False
        if address in (None, "local", "auto"):
            setup._warn_token_auth_enabled()
        setup.logger.warning(OTHER)
        raise _Reached()
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray_join, "check_answers", lambda address: None)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


# how packtool comes to ray.init: (its address argument, RAY_ADDRESS)
STARTS = {"local start": (None, None), "--ray-address auto": ("auto", None), "RAY_ADDRESS=auto": (None, "auto")}


@pytest.mark.parametrize("start", STARTS)
def test_rays_auth_advisory_is_not_said(monkeypatch, caplog, capsys, ray_init, start):
    from packtool.notes import NOTES, mark, since
    address, env = STARTS[start]
    if env is not None:
        monkeypatch.setenv("RAY_ADDRESS", env)
    at = mark()
    before = logging.lastResort
    with caplog.at_level(logging.WARNING), pytest.raises(_Reached):
        init_ray(address)
    said = [r.getMessage() for r in caplog.records] + since(at) + [capsys.readouterr().err]
    assert not [m for m in said if "Token authentication" in m], said
    # Ray's other warning is kept, said by packtool (stop 38's Left 2: tests/engines/test_ray_start_said.py)
    assert f"Ray said while starting: {OTHER}" in since(at) and NOTES
    assert logging.lastResort is before  # only while ray.init runs


@LOCAL_RAY_GROUP  # the subprocess starts a local Ray node
def test_the_finding(tmp_path):
    """S38-8 as filed: a quiet dry run on a local Ray that packtool starts leaves stderr empty."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_ADDRESS")}
    env["PYTHONPATH"] = ROOT
    r = subprocess.run([sys.executable, "-m", "packtool", "pack", GSM8K, "--tokenizer", GPT2, "--shape", "fields",
                        "--prompt-field", "question", "--response-field", "answer", "-C", "1024", "--dry-run",
                        "--cache-dir", str(tmp_path / "c"), "--engine", "ray", "-q"],
                       env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stderr == "", r.stderr
