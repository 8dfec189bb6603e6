"""Issue 23 class 4: SIGTERM to a driver that started Ray ends the packtool way (temporary
files removed, one `terminated (SIGTERM)` line, exit 143), not with Ray's silent exit 15
(its Python handler) nor its core worker's native stack dumps and abort (exit 134)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from conftest import LOCAL_RAY_GROUP

pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'packtool[ray]')")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHILD = r"""
import sys, time
from packtool.engines.ray_engine import init_ray
from packtool.output.folder import claim_output
with claim_output(sys.argv[1]):
    init_ray(num_cpus=1)
    import ray
    ray.get(ray.put(1))  # the core worker is up and talking to the raylet
    print("ready", flush=True)
    time.sleep(120)
"""


@LOCAL_RAY_GROUP  # its child starts a local Ray node
def test_sigterm_after_ray_started(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", None)
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "out")], env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
    assert child.returncode == 128 + signal.SIGTERM, err
    assert "terminated (SIGTERM)" in err, err
    assert "SIGTERM received" not in err and "Traceback" not in err, err
