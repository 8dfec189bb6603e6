"""`pack --engine ray` on two Ray nodes of this machine with no disk shared for data: inputs,
the tokenized cache and the output on the S3 endpoint (moto on 127.0.0.1; the nodes on
127.0.0.2 and 127.0.0.3, see tests/ray_nodes.py), the same bytes as a local-disk pack and as
the local engine's pack from and to the endpoint. No node touches a path under another
node's folders or the driver's temp (every path each node's processes open is recorded); a
driver or a second node killed at seeded random instants leaves the previous output whole
and verifiable, nothing a reader trusts, and the re-run writes the same bytes."""
from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'packtool[ray]')")
pytest.importorskip("moto.server", reason="moto[server] not installed (pip install 'packtool[test]')")

from conftest import GPT2, GSM8K, PEPS, ROOT, S3_ENV  # noqa: E402
from ray_nodes import AUTH_ENV, TwoNodes, reset_driver_auth  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.engines.ray_engine import init_ray, pack_ray  # noqa: E402
from packtool.packing import pack  # noqa: E402
from packtool.planning.core import PackingConfig  # noqa: E402
from packtool.slabs.format import MANIFEST, PENDING_PREFIX, SlabManifest  # noqa: E402
from packtool.storage import locate  # noqa: E402
from packtool.store_lease import LEASE  # noqa: E402
from packtool.tokenize.config import TokenizeConfig  # noqa: E402
from packtool.tokenize.store_cache import ENTRY_META  # noqa: E402
from packtool.verification.run import verify  # noqa: E402

CFG = TokenizeConfig(tokenizer=GPT2, prompt_field="question", response_field="answer")
ALIGN = Alignment(capacity=1024)
PK = PackingConfig("mffd", overflow="split", seed=3)
SHARD = 20_000  # tokens per shard: several shards, so write tasks on both nodes
SEED = int(os.environ.get("PACKTOOL_TEST_KILL_SEED", "24"))
KILLS = int(os.environ.get("PACKTOOL_TEST_DRIVER_KILLS", "1"))  # CI time: one instant (bench: more)
CLI = ["--tokenizer", GPT2, "--prompt-field", "question", "--response-field", "answer", "--max-tokens", "1024",
       "--overflow", "split", "--algorithm", "mffd", "--seed", "3", "--shard-tokens", str(SHARD), "--no-progress"]
RUN: dict = {}  # what the first test measured, for the kill instants
pytestmark = pytest.mark.xdist_group("ray_nodes")  # one cluster: the module on one xdist worker (--dist loadgroup)


@pytest.fixture(scope="module")
def bucket(s3_endpoint, tmp_path_factory):
    """A bucket holding the inputs; the AWS chain (endpoint + dummy keys) in this process, its
    subprocesses and the Ray nodes; the driver's temp folder its own."""
    import uuid

    import boto3
    driver = str(tmp_path_factory.mktemp("driver"))
    with pytest.MonkeyPatch.context() as mp:
        for k, v in {**S3_ENV, "AWS_ENDPOINT_URL": s3_endpoint, "TMPDIR": driver}.items():
            mp.setenv(k, v)
        mp.delenv("AWS_PROFILE", raising=False)
        mp.setattr(tempfile, "tempdir", driver)
        name = f"raynodes-{uuid.uuid4().hex[:8]}"
        boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=name)
        for p in (GSM8K, PEPS):
            with open(p, "rb") as f:
                locate(f"s3://{name}/in/{os.path.basename(p)}").write_bytes(f.read())
        yield f"s3://{name}"


@pytest.fixture(scope="module")
def cluster(bucket):
    root = tempfile.mkdtemp(prefix="rn-", dir="/tmp")  # short: Ray's socket paths have a limit
    nodes = TwoNodes(root, {k: v for k, v in os.environ.items() if k != "TMPDIR"}, ROOT)
    if ray.is_initialized():  # another module's local Ray
        ray.shutdown()
    try:
        with pytest.MonkeyPatch.context() as mp:
            for k, v in AUTH_ENV.items():  # this process and the drivers it starts
                mp.setenv(k, v)
            mp.delenv("RAY_AUTH_TOKEN", raising=False)
            reset_driver_auth()
            nodes.start()
            init_ray(nodes.address)
            nodes.wait_nodes(2)
            yield nodes
    finally:  # always: no Ray process of ours outlives the module
        ray.shutdown()
        nodes.stop()
        shutil.rmtree(root, ignore_errors=True)


def _inputs(bucket):
    return [f"{bucket}/in/{os.path.basename(p)}" for p in (GSM8K, PEPS)]


def _shards(out) -> list[bytes]:
    m = SlabManifest.read(out)
    return [locate(m.shard_path(i)).read_bytes() for i in range(len(m.shards))]


def _only_the_output(out) -> None:
    """The prefix holds the manifest and the shards it lists: no lease, intent or orphan."""
    assert sorted(locate(out).names()) == sorted([*SlabManifest.read(out).shards, MANIFEST])


def _no_foreign_paths(nodes, driver_tmp: str) -> None:
    for node, other in ((nodes.head, nodes.second), (nodes.second, nodes.head)):
        seen = node.opened()
        bad = [(e, p) for _, e, p in seen
               if p.startswith((os.path.dirname(other.scratch) + os.sep, driver_tmp + os.sep))]
        assert not bad, f"{node.name} touched another machine's files: {bad[:5]}"
        own = {p for _, _, p in seen if p.startswith(node.scratch + os.sep)}
        assert own, f"no task wrote on {node.name}'s scratch: the tasks did not run on both nodes"


def test_ray_on_two_nodes_packs_from_and_to_the_store_the_local_bytes(bucket, cluster, tmp_path):
    ref = pack([GSM8K, PEPS], ALIGN, PK, CFG, output=str(tmp_path / "ref"), cache_dir=str(tmp_path / "c"),
               shard_tokens=SHARD)
    want = _shards(str(tmp_path / "ref"))
    assert len(want) >= 3
    t0 = time.perf_counter()
    res = pack_ray(_inputs(bucket), ALIGN, PK, CFG, output=f"{bucket}/ray", cache_dir=f"{bucket}/cache-ray",
                   shard_tokens=SHARD)
    RUN["seconds"] = time.perf_counter() - t0
    assert _shards(f"{bucket}/ray") == want and res.loss_tokens == ref.loss_tokens
    assert verify(f"{bucket}/ray", workers=1).ok
    _only_the_output(f"{bucket}/ray")
    # the local engine from and to the store, on the cache entry the tokenize tasks uploaded
    # (its re-use and re-hash on Ray: the last test)
    local = pack(_inputs(bucket), ALIGN, PK, CFG, output=f"{bucket}/local", cache_dir=f"{bucket}/cache-ray",
                 shard_tokens=SHARD)
    assert local.cache_path.split(os.sep)[-2] == res.cache_path.split("/")[-2]  # one key, both engines
    assert _shards(f"{bucket}/local") == want
    _no_foreign_paths(cluster, os.path.dirname(str(tmp_path)))
    RUN["want"] = want


def _driver(bucket, out, cache) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "packtool", "pack", *_inputs(bucket), *CLI, "--engine", "ray",
                             "--ray-address", RUN["address"], "-o", out, "--cache-dir", cache, "--overwrite"],
                            env={**os.environ, "PYTHONPATH": ROOT}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _whole(out, before_manifest: bytes) -> bool:
    """What a reader of `out` trusts is an output of the reference bytes (old or new)."""
    now = locate(out).join(MANIFEST).read_bytes()
    rep = verify(out, workers=1)  # only orphans a plain Parquet reader would see, if any
    assert rep.ok or {p.check for p in rep.problems} == {"shard_extra"}, rep.problems
    assert _shards(out) == RUN["want"], "the manifest lists other bytes"
    return now == before_manifest


def test_a_driver_killed_at_random_instants_leaves_the_previous_output(bucket, cluster):
    if "want" not in RUN:
        pytest.skip("needs the first test's output")
    RUN["address"] = cluster.address
    out = f"{bucket}/ray"
    rng = random.Random(SEED)
    cache = f"{bucket}/cache-kill"  # a fresh cache: an instant may fall in its build
    for _ in range(KILLS):  # each run starts from what the killed one before it left
        before = locate(out).join(MANIFEST).read_bytes()
        p = _driver(bucket, out, cache)
        t0 = time.time()
        while not locate(out).join(LEASE).exists():  # the driver holds the output
            assert p.poll() is None and time.time() - t0 < 120, p.communicate()
            time.sleep(0.05)
        time.sleep(rng.uniform(0, RUN["seconds"]))
        p.send_signal(signal.SIGKILL)
        p.communicate(timeout=60)
        _whole(out, before)
    # the re-run takes the dead driver's lease at once (same host, process gone), removes
    # what its intent names, never uses a half-built cache entry, writes the same bytes
    res = pack_ray(_inputs(bucket), ALIGN, PK, CFG, output=out, cache_dir=cache, shard_tokens=SHARD, overwrite=True)
    assert _shards(out) == RUN["want"] and verify(out, workers=1).ok
    _only_the_output(out)
    assert locate(res.cache_path.rsplit("/", 1)[0]).join(ENTRY_META).is_file()


def test_the_second_node_killed_at_a_random_instant(bucket, cluster):
    """Last in the module: the cluster keeps one node after it. The cache entry is the first
    test's, committed: re-hashed by Ray tasks, then planned and written from."""
    if "want" not in RUN:
        pytest.skip("needs the first test's output")
    out = f"{bucket}/ray"
    before = locate(out).join(MANIFEST).read_bytes()
    delay = random.Random(SEED + 1).uniform(0, RUN["seconds"] / 2)  # no tokenizing: a shorter run
    killer = threading.Timer(delay, cluster.second.kill)
    killer.start()
    try:
        pack_ray(_inputs(bucket), ALIGN, PK, CFG, output=out, cache_dir=f"{bucket}/cache-ray",
                 shard_tokens=SHARD, overwrite=True)
    except Exception as e:  # a run that could not finish commits nothing
        print(f"run with the node killed after {delay:.1f} s failed: {type(e).__name__}")
    finally:
        killer.join()
    _whole(out, before)
    pack_ray(_inputs(bucket), ALIGN, PK, CFG, output=out, cache_dir=f"{bucket}/cache-ray",
             shard_tokens=SHARD, overwrite=True)
    assert _shards(out) == RUN["want"] and verify(out, workers=1).ok
    _only_the_output(out)
    assert not [n for n in locate(out).names() if n.startswith(PENDING_PREFIX)]
