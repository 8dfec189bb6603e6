import os, sys, time, shutil, json, contextlib, resource
sys.path.insert(0, "/work/main")
from packtool.align import Alignment
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig
import packtool.slabs.writer as W
src, work, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
cache = os.path.join(work, "c"); out = os.path.join(work, "o")
args = (Alignment(capacity=8192), PackingConfig("bfd", overflow="split"), TokenizeConfig(shape="tokens"))
pack([src], *args, out, cache_dir=cache, overwrite=True)
orig = W.writing_heap
res = {"heap": [], "noheap": []}
def flt(): return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(n):
    for k in (("heap", "noheap") if i % 2 == 0 else ("noheap", "heap")):
        W.writing_heap = orig if k == "heap" else contextlib.nullcontext
        f0, t0, c0 = flt(), time.perf_counter(), time.process_time()
        r = pack([src], *args, out, cache_dir=cache, overwrite=True)
        res[k].append((time.perf_counter() - t0, time.process_time() - c0, flt() - f0, r.tokenize_seconds))
        print(k, ["%.3f" % x for x in res[k][-1]], flush=True)
import statistics as st
for k, v in res.items():
    print(k, "wall %.3f cpu %.3f flt %d" % (st.median(x[0] for x in v), st.median(x[1] for x in v), st.median(x[2] for x in v)))
print("cpu ratio pairs", st.median(a[1] / b[1] for a, b in zip(res["heap"], res["noheap"])))
