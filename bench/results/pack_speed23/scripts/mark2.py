"""One whole pack() (fresh cache); after the ingest it prints INGESTED and waits for
/tmp/speed23/go-<pid> (a watcher turns callgrind's instrumentation on), and at the end
os.getpgrp() (callgrind --dump-before) closes the window. usage: PYTHONPATH=TREE python mark2.py N WORK"""
import os, sys, time, shutil
N, WORK = int(sys.argv[1]), sys.argv[2]
import packtool.packing as P
from packtool.align import Alignment
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig
sys.path.insert(0, os.environ["PYTHONPATH"])
from bench.pack_e2e import _make_input
os.makedirs(WORK, exist_ok=True)
src = _make_input(N, os.path.dirname(WORK.rstrip("/")))
orig = P.tokenize_to_cache
def wrapped(*a, **k):
    r = orig(*a, **k)
    go = f"/tmp/speed23/go-{os.getpid()}"
    print("INGESTED", os.getpid(), flush=True)
    while not os.path.exists(go):
        time.sleep(0.2)
    os.getpgrp()
    return r
P.tokenize_to_cache = wrapped
args = (Alignment(capacity=8192), PackingConfig("bfd", overflow="split"), TokenizeConfig(shape="tokens"))
out, cache = os.path.join(WORK, "out"), os.path.join(WORK, "cache")
shutil.rmtree(out, ignore_errors=True); shutil.rmtree(cache, ignore_errors=True)
t0 = time.perf_counter()
r = P.pack([src], *args, out, cache_dir=cache)
os.getpgrp()
print(f"slabs {r.plan.num_slabs} shards {len(r.shards)}")
shutil.rmtree(out, ignore_errors=True); shutil.rmtree(cache, ignore_errors=True)
