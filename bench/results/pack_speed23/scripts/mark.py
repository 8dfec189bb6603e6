"""One whole pack() (fresh cache) with markers: os.stat('/speed23-MARK-*') for strace, and a
call of libc ctermid() (callgrind --dump-before=ctermid) after the ingest returns and at the end.
usage: PYTHONPATH=TREE python mark.py N WORK"""
import ctypes, os, sys, time, shutil
N, WORK = int(sys.argv[1]), sys.argv[2]
import packtool.packing as P
from packtool.align import Alignment
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig
sys.path.insert(0, os.environ["PYTHONPATH"])
from bench.pack_e2e import _make_input
libc = ctypes.CDLL(None)
libc.ctermid.argtypes = [ctypes.c_char_p]
def mark(name):
    os.getpgrp()
    try:
        os.stat(f"/speed23-MARK-{name}")
    except FileNotFoundError:
        pass
os.makedirs(WORK, exist_ok=True)
src = _make_input(N, os.path.dirname(WORK.rstrip("/")))
orig = P.tokenize_to_cache
def wrapped(*a, **k):
    r = orig(*a, **k)
    mark("ingested")
    return r
P.tokenize_to_cache = wrapped
args = (Alignment(capacity=8192), PackingConfig("bfd", overflow="split"), TokenizeConfig(shape="tokens"))
out, cache = os.path.join(WORK, "out"), os.path.join(WORK, "cache")
shutil.rmtree(out, ignore_errors=True); shutil.rmtree(cache, ignore_errors=True)
mark("start")
t0, c0 = time.perf_counter(), time.process_time()
r = P.pack([src], *args, out, cache_dir=cache)
mark("end")
print(f"wall {time.perf_counter()-t0:.3f} cpu {time.process_time()-c0:.3f} ingest {r.tokenize_seconds:.3f} slabs {r.plan.num_slabs} shards {len(r.shards)}")
shutil.rmtree(out, ignore_errors=True); shutil.rmtree(cache, ignore_errors=True)
