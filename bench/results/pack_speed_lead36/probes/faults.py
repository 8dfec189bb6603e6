import os, sys, time, contextlib, resource, threading, collections
sys.path.insert(0, "/work/main")
from packtool.align import Alignment
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig
import packtool.slabs.writer as W, packtool.slabs.routed as R, packtool.heap as H
src, work, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
cache = os.path.join(work, "c"); out = os.path.join(work, "o")
args = (Alignment(capacity=8192), PackingConfig("bfd", overflow="split"), TokenizeConfig(shape="tokens"))
pack([src], *args, out, cache_dir=cache, overwrite=True)
acc = collections.Counter(); lock = threading.Lock()
def tf(): return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
def wrap(name, fn):
    def g(*a, **k):
        f0 = tf()
        try: return fn(*a, **k)
        finally:
            with lock: acc[name] += tf() - f0
    return g
R.put_in_order = wrap("order", R.put_in_order)
W.write_shard_file = wrap("shard", W.write_shard_file)
R.write_shard_file = W.write_shard_file if hasattr(R, "write_shard_file") else None
import packtool.slabs.routed as RR
for nm in dir(RR):
    if nm == "write_shard_file": setattr(RR, nm, W.write_shard_file)
orig = W.writing_heap
for mode in ["heap", "noheap"] * n:
    W.writing_heap = orig if mode == "heap" else contextlib.nullcontext
    acc.clear(); f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    pack([src], *args, out, cache_dir=cache, overwrite=True)
    print(mode, dict(acc), "total", resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0, flush=True)
