"""`pack --engine ray` on two Ray nodes of this machine with no disk shared for data: inputs,
the tokenized cache and the output on the S3 endpoint (moto on 127.0.0.1; the nodes on
127.0.0.2 and 127.0.0.3, see tests/ray_nodes.py), the same bytes as a local-disk pack and as
the local engine's pack from and to the endpoint.

No shared disk, two lines of proof:
1. each node runs in a user+mount namespace of its own (`unshare`) where the other node's
   folder and this test session's temp root (the driver's TMPDIR, the local-disk packs) are
   an empty read-only tmpfs: any read of them by any process of the node (Python, Arrow's
   C++, the raylet) fails, and the pack with it. Where `unshare` is refused, the module says
   why (a printed line) and keeps to the second line;
2. every path each node's Python processes open, list, rename or remove is recorded (audit
   events, and /proc/self/fd sampled every 5 ms for native opens; short ones can be missed),
   and none may lie under the other node's folder or the driver's temp.

Kills: the driver (SIGKILL) and the second node at a random instant of a pack `--overwrite`
over a previous output: a random one of the run's observable points (lease taken, first
cache part up, cache committed, shards being written) plus a random delay, drawn from a
seed that is new each run and printed (replay with PACKTOOL_TEST_KILL_SEED=S;
PACKTOOL_TEST_DRIVER_KILLS=N for more driver instants). Each leaves the previous output
whole and verifiable, nothing a reader trusts, and the re-run writes the same bytes."""
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
from ray_nodes import AUTH_ENV, DRIVER_ENV, TwoNodes, reset_driver_auth  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.engines.ray_engine import init_ray, pack_ray  # noqa: E402
from packtool.packing import pack  # noqa: E402
from packtool.planning.core import PackingConfig  # noqa: E402
from packtool.slabs.format import SlabManifest  # noqa: E402
from packtool.slabs.names import MANIFEST, PENDING_PREFIX  # noqa: E402
from packtool.storage import LEASE, locate  # noqa: E402
from packtool.tokenize.config import TokenizeConfig  # noqa: E402
from packtool.tokenize.store_cache import ENTRY_META  # noqa: E402
from packtool.verification.run import verify  # noqa: E402

CFG = TokenizeConfig(tokenizer=GPT2, prompt_field="question", response_field="answer")
ALIGN = Alignment(capacity=1024)
PK = PackingConfig("mffd", overflow="split", seed=3)
SHARD = 20_000  # tokens per shard: several shards, so write tasks on both nodes
SEED = int(os.environ.get("PACKTOOL_TEST_KILL_SEED") or int.from_bytes(os.urandom(4), "big"))
REPLAY = f"replay: PACKTOOL_TEST_KILL_SEED={SEED}"
JITTER = 1.5  # s: the most a kill waits after the point it chose
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
def cluster(bucket, tmp_path_factory):
    root = tempfile.mkdtemp(prefix="rn-", dir="/tmp")  # short: Ray's socket paths have a limit
    # hidden from both nodes: the session's temp root (the driver's TMPDIR, every tmp_path)
    nodes = TwoNodes(root, {k: v for k, v in os.environ.items() if k != "TMPDIR"}, ROOT,
                     hide=(str(tmp_path_factory.getbasetemp()),))
    if not nodes.isolate():
        print(f"ray nodes share this machine's mounts ({nodes.why_not_isolated}): "
              "no shared disk is shown by the path audit only")
    if ray.is_initialized():  # another module's local Ray
        ray.shutdown()
    try:
        with pytest.MonkeyPatch.context() as mp:
            for k, v in {**AUTH_ENV, **DRIVER_ENV}.items():  # this process and the drivers it starts
                mp.setenv(k, v)
            mp.delenv("RAY_AUTH_TOKEN", raising=False)
            reset_driver_auth()
            nodes.start()
            init_ray(nodes.address)
            nodes.wait_nodes(2)
            if nodes.isolated:  # the nodes see nothing of the driver's folders
                _hidden_on_both(nodes, str(tmp_path_factory.getbasetemp()))
            yield nodes
    finally:  # always: no Ray process of ours outlives the module
        ray.shutdown()
        nodes.stop()
        shutil.rmtree(root, ignore_errors=True)


def _hidden_on_both(nodes, session_tmp: str) -> None:
    """A task on each node looks for the driver's temp root and the other node's scratch
    (both exist here) and finds neither: the namespaces' mounts are in force in the workers."""
    driver = os.path.join(session_tmp, os.listdir(session_tmp)[0])
    f = ray.remote(os.path.exists)  # by reference: the workers import it, not this module
    seen = {(n.name, p): f.options(resources={f"node_{n.name}": 0.01}).remote(p)
            for n, other in ((nodes.head, nodes.second), (nodes.second, nodes.head))
            for p in (driver, other.scratch)}
    assert os.path.exists(driver) and all(os.path.isdir(n.scratch) for n in (nodes.head, nodes.second))
    seen = {k: v for k, v in zip(seen, ray.get(list(seen.values()))) if v}
    assert not seen, f"a node sees another machine's folder: {list(seen)}"


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
    res = pack_ray(_inputs(bucket), ALIGN, PK, CFG, output=f"{bucket}/ray", cache_dir=f"{bucket}/cache-ray",
                   shard_tokens=SHARD)
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


def _objects(uri: str, test) -> frozenset:
    """(path, mtime) of the objects under `uri` whose path passes `test`."""
    try:
        return frozenset((i.path, i.mtime_ns) for i in locate(uri).list() if test(i.path))
    except OSError:  # nothing under the prefix yet
        return frozenset()


def _points(out: str, cache: str | None) -> list:
    """A run's points that a watcher of the store sees, in run order: (name, state()), the
    point passed once state() is non-empty and differs from before the run (an object put
    or put again: a killed run before this one left its own)."""
    pts = [("lease taken", lambda: _objects(out, lambda p: p.endswith("/" + LEASE)))]
    if cache:  # a cache built by this run
        pts += [("first cache part up", lambda: _objects(cache, lambda p: p.endswith(".parquet"))),
                ("cache committed", lambda: _objects(cache, lambda p: p.endswith("/" + ENTRY_META)))]
    return pts + [("shards being written", lambda: _objects(out, lambda p: PENDING_PREFIX in p))]


def _instant(rng: random.Random, points: list):
    """A random point of the run and a random delay after it; call before the run starts.
    Returns kill_then(kill, running): waits for the point (or the run's end), then the delay,
    kills, and says when."""
    k, delay = rng.randrange(len(points)), rng.uniform(0, JITTER)
    name, state = points[k]
    before = state()

    def kill_then(kill, running) -> str:
        t0 = time.time()
        while running() and state() in (before, frozenset()):
            assert time.time() - t0 < 300, f"no '{name}' after 300 s"
            time.sleep(0.05)  # a listing of the in-process endpoint each time
        time.sleep(delay)
        kill()
        return f"{name} + {delay:.2f} s (at {time.time() - t0:.1f} s)"
    return kill_then


def test_a_driver_killed_at_random_instants_leaves_the_previous_output(bucket, cluster):
    if "want" not in RUN:
        pytest.skip("needs the first test's output")
    RUN["address"] = cluster.address
    out = f"{bucket}/ray"
    rng = random.Random(SEED)
    cache = f"{bucket}/cache-kill"  # a fresh cache: an instant may fall in its build
    try:
        for i in range(KILLS):  # each run starts from what the killed one before it left
            before = locate(out).join(MANIFEST).read_bytes()
            kill_then = _instant(rng, _points(out, cache))
            p = _driver(bucket, out, cache)
            at = kill_then(lambda: p.send_signal(signal.SIGKILL), lambda: p.poll() is None)
            p.communicate(timeout=60)
            print(f"driver kill {i}: {at}; {REPLAY}")
            _whole(out, before)
        # the re-run takes the dead driver's lease at once (same host, process gone), removes
        # what its intent names, never uses a half-built cache entry, writes the same bytes
        res = pack_ray(_inputs(bucket), ALIGN, PK, CFG, output=out, cache_dir=cache, shard_tokens=SHARD,
                       overwrite=True)
        assert _shards(out) == RUN["want"] and verify(out, workers=1).ok
        _only_the_output(out)
        assert locate(res.cache_path.rsplit("/", 1)[0]).join(ENTRY_META).is_file()
    except BaseException as e:
        e.add_note(REPLAY)
        raise


def test_the_second_node_killed_at_a_random_instant(bucket, cluster):
    """Last in the module: the cluster keeps one node after it. The cache entry is the first
    test's, committed: re-hashed by Ray tasks, then planned and written from."""
    if "want" not in RUN:
        pytest.skip("needs the first test's output")
    out = f"{bucket}/ray"
    before = locate(out).join(MANIFEST).read_bytes()
    rng = random.Random(SEED + 1)
    done = threading.Event()
    at = []
    kill_then = _instant(rng, _points(out, None))
    killer = threading.Thread(target=lambda: at.append(kill_then(cluster.second.kill, lambda: not done.is_set())))
    killer.start()
    try:
        try:
            pack_ray(_inputs(bucket), ALIGN, PK, CFG, output=out, cache_dir=f"{bucket}/cache-ray",
                     shard_tokens=SHARD, overwrite=True)
        except Exception as e:  # a run that could not finish commits nothing
            print(f"run with the node killed failed: {type(e).__name__}")
        finally:
            done.set()
            killer.join()
        print(f"second node kill: {at}; {REPLAY}")
        _whole(out, before)
        pack_ray(_inputs(bucket), ALIGN, PK, CFG, output=out, cache_dir=f"{bucket}/cache-ray",
                 shard_tokens=SHARD, overwrite=True)
        assert _shards(out) == RUN["want"] and verify(out, workers=1).ok
        _only_the_output(out)
        assert not [n for n in locate(out).names() if n.startswith(PENDING_PREFIX)]
    except BaseException as e:
        e.add_note(REPLAY)
        raise
