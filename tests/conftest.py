"""Shared fixture paths: bundled real data slices and tokenizers under fixtures/ (no ../shared)."""
from __future__ import annotations

import os

# Triton kernels run under the interpreter on machines without a GPU. It must be set before
# anything imports triton (torch and megatron do, from other test modules in the same worker).
if not os.path.exists("/dev/nvidia0"):
    os.environ.setdefault("TRITON_INTERPRET", "1")
# A local Ray's GCS publishes its port within 30 s or the start fails ("Failed to start GCS"):
# on 2 cores under a whole-suite run beside other work it took longer. Ray's own setting.
os.environ.setdefault("RAY_gcs_server_port_wait_time_s", "120")
# Held by the driver before any Ray node of the run starts (a node takes the driver's environment
# at its start): tests/engines/test_ray_task_env.py removes them after one did.
for _name in ("PACKTOOL_TEST_RAY_TASK_ENV_AT_START", "AWS_TEST_RAY_TASK_ENV_AT_START"):
    os.environ.setdefault(_name, "at-start")

import pytest  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "fixtures")
DATA = os.path.join(FIXTURES, "data")
TOKENIZERS = os.path.join(FIXTURES, "tokenizers")

GSM8K = os.path.join(DATA, "gsm8k_train_200.jsonl")
TASKMASTER = os.path.join(DATA, "taskmaster4_chat_200.jsonl.gz")
PEPS = os.path.join(DATA, "peps_long5.jsonl.gz")
SHAREGPT = os.path.join(DATA, "fastchat_sharegpt_120.json")
ALPACA = os.path.join(DATA, "gpteacher_alpaca_200.json")

GPT2 = os.path.join(TOKENIZERS, "gpt2", "tokenizer.json")
MISTRAL_DIR = os.path.join(TOKENIZERS, "mistral-7b-v0.1")
MISTRAL = os.path.join(MISTRAL_DIR, "tokenizer.json")


# Longest first. Under --dist loadgroup xdist hands out the xdist_group runs first (the largest
# first), then single tests in collection order, so a long test collected late kept one worker
# busy while the other had finished. These modules hold the longest single tests (CI durations,
# 2026-12-02: spawned ranks, Inductor compiles, killed subprocesses); their tests go first, in
# this order, and everything else keeps its order.
LONG_FIRST = ("tests/hf/test_hf_collator.py", "tests/megatron/test_megatron_parity_cpu.py",
              "tests/megatron/test_fp8_runs.py", "tests/kernels/test_support_logprob.py",
              "tests/kernels/test_kernels_tp.py", "tests/megatron/test_megatron_tp_cpu.py",
              "tests/engines/test_ray_sigterm.py", "tests/storage/test_store_kill.py",
              "tests/verification/test_verify_unguarded_script.py", "tests/tokenize/test_hf_input.py",
              "tests/megatron/test_megatron_fused.py")


def _long_first(items) -> None:
    rank = {path: i for i, path in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))

def gsm8k_packed(base, rows: int, data: str, *flags: str) -> str:
    """The first `rows` GSM8K rows as `base/DATA` (a .jsonl file, or a folder holding s.jsonl)
    packed with GPT2 at -C 1024 -q and `flags` (-o, --cache-dir, --dry-run): the set-up of the
    tests that need a real output or cache entry. Returns the input's path."""
    from typer.testing import CliRunner

    from packtool.cli.app import app
    src = base / data
    if not data.endswith(".jsonl"):
        src.mkdir()
        src = src / "s.jsonl"
    with open(GSM8K) as f:
        src.write_text("".join(f.readlines()[:rows]))
    given = str(base / data)
    r = CliRunner().invoke(app, ["pack", given, "--tokenizer", GPT2, "-C", "1024", "-q", *flags])
    assert r.exit_code == 0, r.output
    return given

def gsm8k_output(base):
    """GSM8K whole packed with GPT2 at -C 1024 -q into `base/out` (its cache entry in `base/c`),
    and a lengths file `base/l.txt` (3, 5): what the commands' failure tests read. Returns `base`."""
    from typer.testing import CliRunner

    from packtool.cli.app import app
    r = CliRunner().invoke(app, ["pack", GSM8K, "--tokenizer", GPT2, "-C", "1024", "-q", "-o", str(base / "out"),
                                 "--cache-dir", str(base / "c")])
    assert r.exit_code == 0, r.output
    (base / "l.txt").write_text("3\n5\n")
    return base


def fixture_path(*parts: str) -> str:
    return os.path.join(FIXTURES, *parts)


@pytest.fixture
def cache_dir(tmp_path):
    """A fresh tokenized-cache root per test, so tests never share or reuse caches."""
    d = tmp_path / "cache"
    d.mkdir()
    return str(d)


# ---- an S3-compatible endpoint in-process (tests/storage/): moto's server on 127.0.0.1, no network

def _moto_server():
    """`http://127.0.0.1:PORT` of a new moto S3 server on loopback, until the generator ends."""
    server_mod = pytest.importorskip("moto.server", reason="moto[server] not installed (pip install 'packtool[test]')")
    import logging
    import socket
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture(scope="session")
def s3_endpoint():
    """A moto S3 server for this test process (one per xdist worker)."""
    yield from _moto_server()


@pytest.fixture
def fresh_endpoint():
    """A moto S3 server of this test alone: no worker pool or Ray node started before the test
    can know its port (the tests of what workers read from the environment set after a start)."""
    yield from _moto_server()


S3_ENV = {"AWS_ACCESS_KEY_ID": "packtool-test-key-id", "AWS_SECRET_ACCESS_KEY": "packtool-test-SECRET-value",
          "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}


def closed_store(monkeypatch) -> None:
    """AWS's standard chain pointing at a 127.0.0.1 port nothing listens on: a store that cannot
    be reached (or stopped mid-run)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for k, v in {**S3_ENV, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


def upload_tree(local: str, uri: str) -> None:
    """Every file below the local folder `local` written to the store prefix `uri`, at the same
    relative names: a tree made locally (a save_to_disk folder, a cache entry) put on a store."""
    from packtool.storage import locate
    for d, _, files in os.walk(local):
        for f in files:
            rel = os.path.relpath(os.path.join(d, f), local).replace(os.sep, "/")
            locate(uri).join(*rel.split("/")).write_bytes(open(os.path.join(d, f), "rb").read())


@pytest.fixture
def s3(s3_endpoint, monkeypatch, request):
    """A fresh bucket on the in-process endpoint; returns its URI `s3://BUCKET`. The store is
    reached only through the standard AWS environment chain (AWS_ENDPOINT_URL + dummy keys),
    exactly as packtool's users configure it; subprocesses inherit it."""
    import re
    import uuid
    for k, v in {**S3_ENV, "AWS_ENDPOINT_URL": s3_endpoint}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    bucket = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-") + "-" + uuid.uuid4().hex[:8]
    import boto3  # comes with moto; pyarrow honours AWS_ENDPOINT_URL only through from_uri
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    return f"s3://{bucket}"


# ---- one Ray at a time: every test that starts a Ray node, in this process or a child

# Its tests run on one xdist worker, in a row (--dist loadgroup): two Ray nodes starting at once on
# 2 cores time out ("Failed to start GCS"). Every test that starts a Ray node, through local_ray, a
# pack with --engine ray in this process or a subprocess, or a cluster of its own, carries it.
LOCAL_RAY_GROUP = pytest.mark.xdist_group("local_ray")


def ray_grouped(names) -> list:
    """Parameter names, those naming Ray (a word "ray") carrying LOCAL_RAY_GROUP."""
    return [pytest.param(n, marks=LOCAL_RAY_GROUP) if "ray" in str(n).split() else n for n in names]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """--dist loadgroup as pytest-xdist means it: an xdist worker names each test that carries
    xdist_group marks `NODEID@GROUP`, and the scheduler keeps one GROUP on one worker. xdist
    3.8 writes that name into `item._nodeid`, which pytest 9.2's nodes no longer read (their
    nodeid is `_id`): every group was spread over both workers (local Ray starts side by side,
    "Failed to start GCS"). Named here as xdist names it, where it did not. (One hook per
    conftest: the long-first order is set here too, before the names.)"""
    _long_first(items)
    if not getattr(config.option, "loadgroup", False):  # set on xdist workers under --dist loadgroup
        return
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        group = "_".join(names)
        if names and not item.nodeid.endswith("@" + group):
            from _pytest.nodeid import NodeId  # (pytest 9.2's; before it, xdist's own name holds)
            item._id = NodeId.parse(f"{item.nodeid}@{group}")


# the groups whose tests hold Ray up in their process: a local node (local_ray), or a connection
# to tests/ray_nodes' two-node cluster that a module fixture keeps across its tests (ray_nodes)
RAY_GROUPS = ("local_ray", "ray_nodes")


def ray_group(item) -> str | None:
    """The Ray group `item` carries, if any."""
    for m in item.iter_markers("xdist_group"):
        name = m.args[0] if m.args else m.kwargs.get("name")
        if name in RAY_GROUPS:
            return name
    return None


def in_ray_group(item) -> bool:
    return ray_group(item) == "local_ray"


@pytest.fixture
def local_ray(request):
    """A local Ray (2 CPUs), started by the first test that asks and kept up while the next
    tests ask too (a start costs ~10 s on 2 cores); shut down after the last of a run of them
    (pytest_runtest_teardown), so no idle Ray sits beside other tests."""
    ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'packtool[ray]')")
    if not in_ray_group(request.node):
        pytest.fail(f"{request.node.nodeid} asks for local_ray without LOCAL_RAY_GROUP (tests/conftest.py): "
                    "under xdist its Ray would start beside the group's")
    from packtool.engines.ray_engine import init_ray
    if not ray.is_initialized():
        init_ray(num_cpus=2)
    return ray


def _ray_up() -> bool:
    import sys
    ray = sys.modules.get("ray")
    return ray is not None and hasattr(ray, "is_initialized") and ray.is_initialized()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """A Ray left up in this worker is shut down before the first test outside its group (a
    ray_nodes test's connection to the cluster kept, a local node never taken for it); one a test
    outside both groups started (pack_ray leaves its node up for the process) fails that test,
    since under xdist it ran beside the group's. Checked after the test's own teardown, so a
    failure here leaves no fixture of it standing for the next test. A teardown that raised (a
    module fixture's, the cluster's) still gets the shutdown, its own error standing: skipped,
    Ray stayed up and the next test outside the group was blamed for it (RB-7)."""
    try:
        result = yield
    except BaseException:
        _shut_between_groups(item, nextitem)
        raise
    if _shut_between_groups(item, nextitem) and ray_group(item) is None:
        pytest.fail(f"{item.nodeid} started a Ray node in this process without LOCAL_RAY_GROUP "
                    "(tests/conftest.py): mark it (or its Ray parameters) with it", pytrace=False)
    return result


def _shut_between_groups(item, nextitem) -> bool:
    """Shut a Ray that is up down before the first test outside `item`'s group; whether it was up."""
    up = _ray_up()
    if up and (nextitem is None or ray_group(nextitem) != ray_group(item)):
        import ray
        ray.shutdown()
    return up


@pytest.fixture(autouse=True)
def _signal_state_kept():
    """Each test leaves SIGINT/SIGTERM as it found them (handler and the main thread's mask):
    tests run packtool's command in-process (handlers, held signals), and a mask or an ignored
    signal left behind is inherited by every later child of that xdist worker, where a stop
    test's signal would never land."""
    import signal
    stops = {signal.SIGINT, signal.SIGTERM}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    handlers = {s: signal.getsignal(s) for s in stops}
    yield
    for s, h in handlers.items():
        if signal.getsignal(s) is not h and h is not None:
            signal.signal(s, h)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)


LONG_ROW = 4000  # characters: a row the long-row tests' stand-in memory limit cannot hold


def long_row_inputs(tmp_path, where: str) -> list[str]:
    """Two JSON Lines files; a LONG_ROW-character row in file `where` ("a" or "b") at row 2
    (tests/tokenize/test_long_row_named.py, tests/engines/test_ray_long_row_named.py)."""
    import json
    paths = []
    for name in ("a", "b"):
        rows = ["short row %d " % i * 20 for i in range(5)]
        if name == where:
            rows[2] = "long " * (LONG_ROW // 5 + 10)
        p = tmp_path / f"{name}.jsonl"
        p.write_text("".join(json.dumps({"text": t}) + "\n" for t in rows))
        paths.append(str(p))
    return paths
