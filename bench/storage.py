"""A pre-tokenized pack to and from an S3 endpoint beside local disk: local -> local,
local -> S3, S3 -> S3 (packtool's local engine), and S3 -> S3 with `--engine ray` on two Ray
nodes of this machine (tests/ray_nodes.py: `ray start` each, `--num-cpus 1`, own temp and
scratch folders, the cache on the store too), BENCHMARKS.md "Object storage".

The endpoint is moto's S3 server (the one tests/storage use) in its own process on 127.0.0.1,
wrapped in a WSGI layer that counts requests by method and the bytes of request and response
bodies. It keeps objects in memory and runs in Python: it is a protocol stand-in, not a
model of S3's throughput; what transfers to a real store are the request counts and bytes.
Input: bench/pack_e2e.py's pre-tokenized Parquet (N sequences, `input_ids` list<int32>).
Each run is a fresh process (for Ray: a fresh driver, so a fresh job with its own workers, on
a cluster started once, outside the timing); modes alternate; the cache is fresh per run.
Peak RSS is the driver's (for Ray the workers' is not in it: `node_rss` samples each node's
processes every 0.5 s and keeps the largest sum).

    python bench/storage.py --size 1000000 --repeat 2 --log bench/results/storage/runs.jsonl
    python bench/storage.py --size 100000 --modes s3->s3 s3->s3-ray --log ...
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
C = 8192
MODES = ("local->local", "local->s3", "s3->s3", "s3->s3-ray")
ENV = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench-secret", "AWS_DEFAULT_REGION": "us-east-1",
       "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}

SERVER = r"""
import json, logging, sys, threading
from werkzeug.serving import make_server
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
logging.getLogger("werkzeug").setLevel(logging.ERROR)
stats, lock = {"requests": {}, "bytes_in": 0, "bytes_out": 0}, threading.Lock()
app = DomainDispatcherApplication(create_backend_app)
def counting(environ, start):
    if environ.get("PATH_INFO") == "/__stats":
        with lock:
            body = json.dumps(stats).encode()
        start("200 OK", [("Content-Type", "application/json")])
        return [body]
    n = int(environ.get("CONTENT_LENGTH") or 0)
    chunked = environ.get("HTTP_TRANSFER_ENCODING", "").lower() == "chunked"
    body = environ["wsgi.input"].read() if chunked else environ["wsgi.input"].read(n) if n else b""
    import io
    environ["wsgi.input"] = io.BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))
    environ.pop("HTTP_TRANSFER_ENCODING", None)
    out = [b"".join(app(environ, start))]
    with lock:
        m = environ["REQUEST_METHOD"]
        stats["requests"][m] = stats["requests"].get(m, 0) + 1
        stats["bytes_in"] += len(body)
        stats["bytes_out"] += len(out[0])
    return out
srv = make_server("127.0.0.1", int(sys.argv[1]), counting, True, request_handler=MotoRequestHandler)
print("ready", flush=True)
srv.serve_forever()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stats(endpoint: str) -> dict:
    import urllib.request
    with urllib.request.urlopen(endpoint + "/__stats") as r:
        return json.loads(r.read())


def _peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child(mode: str, src: str, work: str, endpoint: str, ray_address: str = "") -> dict:
    from packtool.align import Alignment
    from packtool.packing import pack
    from packtool.planning.core import PackingConfig
    from packtool.tokenize.config import TokenizeConfig
    ray = mode.endswith("-ray")
    cache = f"s3://bench/cache-{os.getpid()}" if ray else tempfile.mkdtemp(dir=work, prefix="cache-")
    out = os.path.join(work, "out") if mode.endswith("local") else f"s3://bench/out-{os.getpid()}"
    inp = src if mode.startswith("local") else "s3://bench/in/input.parquet"
    args = ([inp], Alignment(capacity=C), PackingConfig("bfd", overflow="split"), TokenizeConfig(shape="tokens"))
    before = _stats(endpoint)
    t0 = time.perf_counter()
    if ray:
        from packtool.engines.ray_engine import pack_ray
        res = pack_ray(*args, output=out, cache_dir=cache, ray_address=ray_address)
    else:
        res = pack(*args, output=out, cache_dir=cache)
    sec = time.perf_counter() - t0
    after = _stats(endpoint)
    reqs = {m: after["requests"].get(m, 0) - before["requests"].get(m, 0) for m in after["requests"]}
    moved = after["bytes_in"] - before["bytes_in"] + after["bytes_out"] - before["bytes_out"]
    from packtool.storage import is_uri, locate
    if is_uri(cache):
        loc = locate(cache)
        loc.fs.delete_dir_contents(loc.path, missing_dir_ok=True)
    else:
        shutil.rmtree(cache, ignore_errors=True)
    if mode.endswith("local"):
        shutil.rmtree(out, ignore_errors=True)
    else:
        loc = locate(out)
        loc.fs.delete_dir_contents(loc.path, missing_dir_ok=True)
    return dict(mode=mode, seconds=sec, peak_rss=_peak(), requests=reqs, bytes_moved=moved,
                out_bytes=sum(s.bytes for s in res.shards), shards=len(res.shards),
                tokens=res.summary.padding.real_tokens)


def table(rows: list[dict]) -> str:
    """Median (min-max) per size and mode."""
    import statistics
    out = ["| sequences | mode | runs | wall s (median, range) | bytes moved to/from the endpoint | requests (GET/PUT/POST/HEAD/DELETE) | requests per GB moved | peak RSS | load (1 min, before-after) |",
           "|---|---|---|---|---|---|---|---|---|"]
    for size in sorted({r["size"] for r in rows}):
        for mode in MODES:
            rs = [r for r in rows if r["size"] == size and r["mode"] == mode]
            if not rs:
                continue
            sec = [r["seconds"] for r in rs]
            med = lambda k: statistics.median(r[k] for r in rs)  # noqa: E731
            req = {m: int(statistics.median(r["requests"].get(m, 0) for r in rs)) for m in ("GET", "PUT", "POST", "HEAD", "DELETE")}
            per_gb = [r["requests_per_gb"] for r in rs if r["requests_per_gb"]]
            out.append(f"| {size:,} | {mode} | {len(rs)} | {statistics.median(sec):.1f} ({min(sec):.1f}-{max(sec):.1f}) | "
                       f"{med('bytes_moved') / 1e6:,.0f} MB | {'/'.join(str(v) for v in req.values())} | "
                       f"{statistics.median(per_gb):.0f} | " if per_gb else
                       f"| {size:,} | {mode} | {len(rs)} | {statistics.median(sec):.1f} ({min(sec):.1f}-{max(sec):.1f}) | "
                       f"0 | 0 | - | ")
            nodes = [sum(r["node_rss"].values()) for r in rs if r.get("node_rss")]
            out[-1] += f"{med('peak_rss') / 2**20:,.0f} MiB" + (
                f" driver + {statistics.median(nodes) / 2**20:,.0f} MiB both nodes" if nodes else "") + " | " + ", ".join(f"{r['load'][0]:.0f}-{r['load'][1]:.0f}" for r in rs) + " |"
    return "\n".join(out)


def _cluster(env: dict):
    """Two Ray nodes on this machine (no audit: its sampling thread would cost time)."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from ray_nodes import TwoNodes
    root = tempfile.mkdtemp(prefix="rn-", dir="/tmp")
    c = TwoNodes(root, {k: v for k, v in env.items() if k != "PYTHONPATH"}, ROOT, audit=False).start()
    import ray
    ray.init(address=c.address, log_to_driver=False)
    c.wait_nodes(2)
    ray.shutdown()
    return c


class _NodeRss:
    """The largest summed RSS of every process of both nodes (workers, raylets, object
    stores: the object store's shared memory counts where it is touched), sampled."""

    def __init__(self, cluster):
        import threading
        self.cluster, self.peak, self._stop = cluster, {}, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        import psutil
        while not self._stop.wait(0.5):
            for node in (self.cluster.head, self.cluster.second):
                total = 0
                for pid in node.pids():
                    try:
                        total += psutil.Process(pid).memory_info().rss
                    except psutil.Error:
                        pass
                self.peak[node.name] = max(self.peak.get(node.name, 0), total)

    def stop(self) -> dict:
        self._stop.set()
        self._t.join()
        return self.peak


def _load() -> float:
    return os.getloadavg()[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "packtool_bench_storage"))
    ap.add_argument("--log")
    ap.add_argument("--modes", nargs="+", default=list(MODES[:3]), choices=MODES)
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    ap.add_argument("--table", help="print BENCHMARKS.md's table from a --log file")
    a = ap.parse_args()
    if a.table:
        print(table([json.loads(line) for line in open(a.table)]))
        return
    if a.child:
        print(json.dumps(child(*a.child)))
        return
    os.makedirs(a.work, exist_ok=True)
    from bench.pack_e2e import _make_input
    src = _make_input(a.size, a.work)
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    env = {**os.environ, **ENV, "AWS_ENDPOINT_URL": endpoint, "PYTHONPATH": ROOT}
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], env=env, stdout=subprocess.PIPE, text=True)
    cluster = None
    try:
        assert server.stdout.readline().strip() == "ready"
        os.environ.update({k: env[k] for k in (*ENV, "AWS_ENDPOINT_URL")})
        import boto3
        s3 = boto3.client("s3", endpoint_url=endpoint)
        s3.create_bucket(Bucket="bench")
        s3.upload_file(src, "bench", "in/input.parquet")
        rows = []
        if any(m.endswith("-ray") for m in a.modes):
            cluster = _cluster(env)
        for r in range(a.repeat):
            for mode in a.modes:
                load0 = _load()
                addr = cluster.address if mode.endswith("-ray") else ""
                sampler = _NodeRss(cluster) if addr else None
                p = subprocess.run([sys.executable, __file__, "--child", mode, src, a.work, endpoint, addr],
                                   env=env, capture_output=True, text=True)
                if p.returncode:
                    raise SystemExit(p.stderr[-3000:])
                row = json.loads(p.stdout.strip().splitlines()[-1])
                if sampler:
                    row["node_rss"] = sampler.stop()
                row.update(size=a.size, input_bytes=os.path.getsize(src), load=[load0, _load()], repeat=r,
                           at=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()))
                nreq = sum(row["requests"].values())
                row["requests_per_gb"] = nreq / (row["bytes_moved"] / 1e9) if row["bytes_moved"] else None
                print(json.dumps(row), flush=True)
                rows.append(row)
                if a.log:
                    os.makedirs(os.path.dirname(a.log), exist_ok=True)
                    with open(a.log, "a") as f:
                        f.write(json.dumps(row) + "\n")
    finally:
        if cluster is not None:
            cluster.stop()
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
