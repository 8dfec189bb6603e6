"""The one owner of the environment packtool's Ray tasks run under: the driver's, as it is when
each task is submitted, for the variables a task reads.

A Ray job's workers get their environment once: a local node packtool starts (`init_ray`) takes
the driver's at its start, and the job's runtime_env (PACKTOOL_* variables, given to a cluster's
workers too) is fixed at `ray.init`. A library user who set AWS_ENDPOINT_URL (or AWS_*, HF_*,
PACKTOOL_*) after a first `pack_ray` in the same process got tasks without it, which reached
real AWS (the process pool's twin: packtool.workers). Every task packtool submits carries the
variables that changed since then in its own runtime_env (Ray merges it with the job's per
variable); none changed, it carries nothing and runs on the job's warm workers.

What a task reads: on a local node, every variable of READS (the node's workers are this
machine's and had the driver's at the start); on a cluster joined, PACKTOOL_* alone, as at the
start (the nodes' own AWS and HF settings are theirs). A variable removed since the start is
absent in the task, as in the driver: a runtime_env can only set variables, so the task's
runtime_env names the removed ones (REMOVED) and the job's worker start hook (`job_options`)
unsets them in each worker that runs under it, before any task (a worker serves one runtime_env).
Through Ray Client (ray://), which takes no start hook, one is given as "" instead.

A driver run by `ray job submit` is handed the job's runtime_env (SUBMITTED), which ray.init
merges with the one packtool gives and refuses any key both give: the job's own start hook (Ray's
way to set up logging on workers) or a PACKTOOL_* variable it sets. The job's wins, packtool's is
left out: its workers then hold the job's values (a task whose driver holds another is given the
driver's, as any change), and with the job's hook a removed variable is given as "", as through
Ray Client.
"""
from __future__ import annotations

import json
import os

READS = ("PACKTOOL_", "AWS_", "HF_", "HUGGING_FACE_", "TRANSFORMERS_", "TOKENIZERS_", "GOOGLE_",
         "STORAGE_EMULATOR_HOST", "AZURE_")
JOB = ("PACKTOOL_",)  # what a joined cluster's workers take from the driver

SUBMITTED = "RAY_JOB_CONFIG_JSON_ENV_VAR"  # Ray's (ray._private.runtime_env.constants): the job's config
HOOK = "worker_process_setup_hook"
REMOVED = "__PACKTOOL_RAY_REMOVED"  # a task runtime_env's names to unset (outside READS: never read back)

_START: dict = {}  # the job (its id, its node's), the prefixes its tasks read from the driver, their values then


def _of(prefixes) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(prefixes)}


def job_options(address: str | None) -> dict | None:
    """The runtime_env `ray.init` gives the job: the driver's PACKTOOL_* variables, and the
    worker start hook that unsets what a task's runtime_env names removed (not through Ray
    Client, which takes none); each left out where a submitted job gives its own."""
    job = _submitted()
    env = {k: v for k, v in _of(JOB).items() if k not in job.get("env_vars", {})}
    no_hook = (address or "").startswith("ray://") or HOOK in job  # Ray Client takes none; the job has its own
    return {**({"env_vars": env} if env else {}), **({} if no_hook else {HOOK: _unset_removed()})} or None


def _submitted() -> dict:
    """The runtime_env of the job this driver runs as (`ray job submit`'s), {} for none or one
    that Ray's own ray.init cannot read either (Ray then says why)."""
    try:
        job = json.loads(os.environ.get(SUBMITTED) or "{}").get("runtime_env") or {}
    except (ValueError, AttributeError):
        return {}
    if not isinstance(job, dict):
        return {}
    env = job.get("env_vars")
    return {**job, "env_vars": env if isinstance(env, dict) else {}}


def _unset_removed():
    """The hook, made here so that Ray pickles it by value: a cluster's workers run it without
    importing packtool (a worker that cannot start would never run a task). Through os.environ, so native code (Arrow's S3
    client, the AWS chain) does not see the variable either."""
    marker = REMOVED

    def unset_removed() -> None:
        import json
        import os
        for k in json.loads(os.environ.pop(marker, "[]")):
            os.environ.pop(k, None)
    return unset_removed


def started(local: bool) -> None:
    """Right after packtool's `ray.init`: what the job's workers hold from now on."""
    import ray
    prefixes = READS if local else JOB
    _START.clear()
    held = {k: v for k, v in _submitted().get("env_vars", {}).items() if k.startswith(prefixes)}  # the job's win
    _START.update(job=_job(ray), prefixes=prefixes, env={**_of(prefixes), **held})


def _job(ray) -> tuple[str, str]:
    """The job, told apart from a later one (a fresh local Ray numbers its first job as the last did)."""
    ctx = ray.get_runtime_context()
    return ctx.get_job_id(), ctx.get_node_id()


def changed() -> dict[str, str]:
    """The env_vars of a task's runtime_env: the variables a task reads whose value differs
    from the job's start, those removed since as "" and named in REMOVED (the hook unsets
    them); {} for a Ray that packtool did not start in this job (its runtime_env is its starter's)."""
    import ray
    if not _START or not ray.is_initialized() or _job(ray) != _START["job"]:
        return {}
    now, then = _of(_START["prefixes"]), _START["env"]
    got = {k: v for k, v in now.items() if then.get(k) != v}
    gone = sorted(k for k in then if k not in now)
    if gone:  # "" too: a worker that ran no hook (Ray Client) keeps no value of the driver's past
        got.update({**dict.fromkeys(gone, ""), REMOVED: json.dumps(gone)})
    return got


def task_options() -> dict:
    """Ray's remote options that give a task the driver's environment as it is now: every
    task packtool submits takes them (`ray.remote(**o)`, and Ray Data's reads and maps as their named
    `runtime_env`: its `ray_remote_args` is deprecated since Ray 2.60, removed in 2.64)."""
    env = changed()
    return {"runtime_env": {"env_vars": env}} if env else {}


def remote(f, **options):
    """`ray.remote(**options)(f)` whose tasks run under `task_options()` of this moment."""
    import ray
    options = {**options, **task_options()}
    return ray.remote(**options)(f) if options else ray.remote(f)  # (ray.remote() refuses no options)
