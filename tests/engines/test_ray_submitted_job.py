"""RB-4 (session 48): a driver run by `ray job submit` is handed the job's runtime_env (Ray's
RAY_JOB_CONFIG_JSON_ENV_VAR), which ray.init merges with the one packtool gives and refuses any key
both give. A job with its own worker_process_setup_hook (Ray's way to set up logging on workers)
or its own PACKTOOL_* variable (the natural way to configure a submitted job) failed to start:
"Failed to merge the Job's runtime env ...", said as a Ray that cannot start or be joined.

The class: every key packtool's runtime_env gives (the start hook, each PACKTOOL_* variable,
same value or another) given by the job too, over every address kind; and a real local start
under such a job: it packs, the job's values hold on its workers, the driver's later changes
reach its tasks as before (a removed one as "" where the job's hook stands for packtool's)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import GPT2, LOCAL_RAY_GROUP, PEPS

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'packtool[ray]')")

from ray.runtime_env.runtime_env import _merge_runtime_env  # noqa: E402 (Ray's own merge, as ray.init runs it)

from packtool.engines.ray_env import SUBMITTED, job_options  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SET = "PACKTOOL_TEST_SUBMITTED_SET"  # the driver holds "driver"; some jobs give it too
GONE = "PACKTOOL_TEST_SUBMITTED_GONE"  # the driver holds it at the start and removes it after
HOOK = {"worker_process_setup_hook": "os.getcwd"}  # a job's own hook (any callable Ray can import)
JOBS = {"its own start hook": HOOK,
        "a PACKTOOL_* variable, the driver's value": {"env_vars": {SET: "driver"}},
        "a PACKTOOL_* variable, another value": {"env_vars": {SET: "job"}},
        "both": {**HOOK, "env_vars": {SET: "job", "OTHER": "1"}}}
ADDRESSES = [None, "10.0.0.1:6379", "ray://10.0.0.1:10001"]


@pytest.mark.parametrize("address", ADDRESSES)
@pytest.mark.parametrize("job", sorted(JOBS))
def test_packtools_runtime_env_merges_with_the_submitted_jobs(monkeypatch, job, address):
    monkeypatch.setenv(SUBMITTED, json.dumps({"runtime_env": JOBS[job], "metadata": {}}))
    monkeypatch.setenv(SET, "driver")
    monkeypatch.setenv("PACKTOOL_TEST_SUBMITTED_OWN", "driver")
    merged = _merge_runtime_env(JOBS[job], job_options(address))
    assert merged is not None
    given = JOBS[job]
    for k, v in given.items():  # the job's own keys hold as it gave them
        assert (merged[k].items() >= v.items()) if k == "env_vars" else merged[k] == v, k
    assert merged["env_vars"]["PACKTOOL_TEST_SUBMITTED_OWN"] == "driver"  # the driver's others still given


@pytest.mark.parametrize("config", ["", "{", "[]", '{"runtime_env": 3}', '{"runtime_env": {"env_vars": 3}}'])
def test_a_job_config_ray_cannot_read_either_changes_nothing(monkeypatch, config):
    monkeypatch.setenv(SUBMITTED, config)
    monkeypatch.setenv(SET, "driver")
    got = job_options(None)
    assert got["env_vars"][SET] == "driver" and "worker_process_setup_hook" in got


CHILD = r"""
import json, os, sys
import ray
from packtool.align import Alignment
from packtool.engines.ray_engine import pack_ray
from packtool.engines.ray_env import remote
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig
from packtool.verification.run import verify
out, peps, gpt2, set_, gone = sys.argv[1:]
pack_ray([peps], Alignment(cp=2, capacity=1024), PackingConfig("bfd", overflow="split"),
         TokenizeConfig(tokenizer=gpt2), output=out, num_cpus=1)
seen = lambda names: {n: os.environ.get(n, "<absent>") for n in names}  # noqa: E731
at_start = ray.get(remote(seen).remote([set_]))
held = ray.get(ray.remote(seen).remote([set_]))  # what the job's workers hold, without packtool's task options
os.environ[set_] = "later"
os.environ.pop(gone)
print(json.dumps({"ok": verify(out, workers=1).ok, "start": at_start, "held": held,
                  "now": ray.get(remote(seen).remote([set_, gone]))}))
"""


@LOCAL_RAY_GROUP  # its child starts a local Ray node
@pytest.mark.parametrize("job", sorted(JOBS))
def test_a_submitted_job_with_its_own_runtime_env_packs(tmp_path, job):
    env = dict(os.environ, PYTHONPATH=ROOT, **{SUBMITTED: json.dumps({"runtime_env": JOBS[job]}), SET: "driver",
                                               GONE: "at-start"})
    run = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "out"), PEPS, GPT2, SET, GONE], env=env,
                         text=True, capture_output=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["ok"]
    assert got["held"] == {SET: JOBS[job].get("env_vars", {}).get(SET, "driver")}  # the job's value holds
    assert got["start"] == {SET: "driver"}  # and a task packtool submits runs under the driver's
    # a removed variable: unset by packtool's hook; given as "" where the job's hook stands instead
    assert got["now"] == {SET: "later", GONE: "" if "worker_process_setup_hook" in JOBS[job] else "<absent>"}
