"""A pre-tokenized pack to and from an S3 endpoint beside local disk: local -> local,
local -> S3, S3 -> S3 (packtool's local engine, BENCHMARKS.md "Object storage").

The endpoint is moto's S3 server (the one tests/storage use) in its own process on 127.0.0.1,
wrapped in a WSGI layer that counts requests by method and the bytes of request and response
bodies. It keeps objects in memory and runs in Python: it is a protocol stand-in, not a
model of S3's throughput; what transfers to a real store are the request counts and bytes.
Input: bench/pack_e2e.py's pre-tokenized Parquet (N sequences, `input_ids` list<int32>).
Each run is a fresh process; modes alternate; the cache directory is fresh per run.

    python bench/storage.py --size 1000000 --repeat 2 --log bench/results/storage/runs.jsonl
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
MODES = ("local->local", "local->s3", "s3->s3")
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


def child(mode: str, src: str, work: str, endpoint: str) -> dict:
    from packtool.align import Alignment
    from packtool.packing import pack
    from packtool.planning.core import PackingConfig
    from packtool.tokenize.config import TokenizeConfig
    cache = tempfile.mkdtemp(dir=work, prefix="cache-")
    out = os.path.join(work, "out") if mode.endswith("local") else f"s3://bench/out-{os.getpid()}"
    inp = src if mode.startswith("local") else "s3://bench/in/input.parquet"
    before = _stats(endpoint)
    t0 = time.perf_counter()
    res = pack([inp], Alignment(capacity=C), PackingConfig("bfd", overflow="split"), TokenizeConfig(shape="tokens"),
               output=out, cache_dir=cache)
    sec = time.perf_counter() - t0
    after = _stats(endpoint)
    reqs = {m: after["requests"].get(m, 0) - before["requests"].get(m, 0) for m in after["requests"]}
    moved = after["bytes_in"] - before["bytes_in"] + after["bytes_out"] - before["bytes_out"]
    shutil.rmtree(cache, ignore_errors=True)
    if mode.endswith("local"):
        shutil.rmtree(out, ignore_errors=True)
    else:
        from packtool.storage import locate
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
            out[-1] += f"{med('peak_rss') / 2**20:,.0f} MiB | " + ", ".join(f"{r['load'][0]:.0f}-{r['load'][1]:.0f}" for r in rs) + " |"
    return "\n".join(out)


def _load() -> float:
    return os.getloadavg()[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "packtool_bench_storage"))
    ap.add_argument("--log")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
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
    try:
        assert server.stdout.readline().strip() == "ready"
        os.environ.update({k: env[k] for k in (*ENV, "AWS_ENDPOINT_URL")})
        import boto3
        s3 = boto3.client("s3", endpoint_url=endpoint)
        s3.create_bucket(Bucket="bench")
        s3.upload_file(src, "bench", "in/input.parquet")
        rows = []
        for r in range(a.repeat):
            for mode in MODES:
                load0 = _load()
                p = subprocess.run([sys.executable, __file__, "--child", mode, src, a.work, endpoint],
                                   env=env, capture_output=True, text=True)
                if p.returncode:
                    raise SystemExit(p.stderr[-3000:])
                row = json.loads(p.stdout.strip().splitlines()[-1])
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
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
