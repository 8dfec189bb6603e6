"""whole pack() with a fresh cache, as bench/pack_e2e_pretok.py's child runs it (pyarrow loaded
by the input maker first, so Arrow's pool is pyarrow's default unless ARROW_DEFAULT_MEMORY_POOL);
per phase (ingest = tokenize_to_cache; rest = the remainder of the call): wall, user, sys,
minor faults, context switches. usage: PYTHONPATH=TREE python ru.py N REPEAT WORK"""
import os, sys, time, json, shutil, resource
N, R, WORK = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
sys.path.insert(0, os.environ["PYTHONPATH"])
from bench.pack_e2e import _make_input
os.makedirs(WORK, exist_ok=True)
src = _make_input(N, os.path.dirname(WORK.rstrip("/")))
import packtool.packing as P
import pyarrow as pa
from packtool.align import Alignment
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig
def snap():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return (time.perf_counter(), r.ru_utime, r.ru_stime, r.ru_minflt, r.ru_nvcsw, r.ru_nivcsw)
def d(a, b):
    return dict(zip(("wall", "user", "sys", "minflt", "vcsw", "ivcsw"), (y - x for x, y in zip(a, b))))
orig = P.tokenize_to_cache
mark = {}
def wrapped(*a, **k):
    r = orig(*a, **k)
    mark["ing"] = snap()
    return r
P.tokenize_to_cache = wrapped
args = (Alignment(capacity=8192), PackingConfig("bfd", overflow="split"), TokenizeConfig(shape="tokens"))
out, cache = os.path.join(WORK, "out"), os.path.join(WORK, "cache")
res = []
for i in range(R + 1):
    shutil.rmtree(out, ignore_errors=True); shutil.rmtree(cache, ignore_errors=True)
    os.sync()
    s0 = snap()
    r = P.pack([src], *args, out, cache_dir=cache)
    s1 = snap()
    row = dict(run=i, pool=pa.default_memory_pool().backend_name, load=os.getloadavg()[0],
               ingest=d(s0, mark["ing"]), rest=d(mark["ing"], s1))
    if i:
        res.append(row)
    print(json.dumps(row), flush=True)
shutil.rmtree(out, ignore_errors=True); shutil.rmtree(cache, ignore_errors=True)
