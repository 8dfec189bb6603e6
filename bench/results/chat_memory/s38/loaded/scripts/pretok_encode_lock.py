"""s38 probe (loaded box): a pre-tokenized pack (bench/pack_e2e.py's input, C=8192, bfd, split)
with `free` writers or with one global lock around ParquetWriter.write_batch (`lock`: at most
one writer encodes a row group, the brief's stagger). Prints the lock's waits and wait
seconds, wall, and the RSS / Arrow pool peaks sampled while writing.

    python pretok_encode_lock.py TREE ROWS WORK free|lock
"""
import os, sys, time, threading, json
ROOT = sys.argv[1]; n = int(sys.argv[2]); work = sys.argv[3]; mode = sys.argv[4]
sys.path.insert(0, ROOT)
import packtool  # jemalloc + decay, as the CLI
from bench.pack_e2e import _make_input
src = _make_input(n, work)
from packtool.packing import pack
from packtool.align import Alignment
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig
import pyarrow as pa, pyarrow.parquet as pq
from packtool.slabs import writer
W = {"waits": 0, "wait_s": 0.0}
inw = [0]
real = pq.ParquetWriter.write_batch
lk = threading.Lock()
def wb(self, *a, **k):
    inw[0] = 1
    if mode == "lock":
        if not lk.acquire(blocking=False):
            t = time.perf_counter(); lk.acquire(); W["waits"] += 1; W["wait_s"] += time.perf_counter() - t
        try: return real(self, *a, **k)
        finally: lk.release()
    return real(self, *a, **k)
pq.ParquetWriter.write_batch = wb
pk = {"rss": 0, "arrow": 0}
stop = [False]
def sample():
    while not stop[0]:
        if inw[0]:
            with open("/proc/self/statm") as f: r = int(f.read().split()[1]) * 4096 >> 20
            pk["rss"] = max(pk["rss"], r); pk["arrow"] = max(pk["arrow"], pa.default_memory_pool().bytes_allocated() >> 20)
        time.sleep(0.002)
threading.Thread(target=sample, daemon=True).start()
import shutil
for d in ("c", "o"): shutil.rmtree(os.path.join(work, d), ignore_errors=True)
t0 = time.perf_counter()
r = pack([src], Alignment(capacity=8192), PackingConfig("bfd", overflow="split"), TokenizeConfig(shape="tokens"),
         os.path.join(work, "o"), cache_dir=os.path.join(work, "c"))
stop[0] = True
print(json.dumps(dict(W, mode=mode, n=n, wall=round(time.perf_counter() - t0, 2), write_rss_peak=pk["rss"], write_arrow_peak=pk["arrow"], pool=pa.default_memory_pool().backend_name, load=round(os.getloadavg()[0], 1))))
