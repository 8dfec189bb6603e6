"""Running peak of RSS / anonymous RSS at every RIG_EVERY rows written, while one process tokenizes a
chat file (issue 23 class 8: does the floor rise, or only the peak?). Knobs, by environment:
RIG_MALLOPT=M_MMAP_THRESHOLD=N,M_ARENA_MAX=N,... (glibc mallopt at start), RIG_TRIM=1 (malloc_trim
after every encode chunk), RIG_SLACK=MiB (the HeapBound slack), RIG_ONEBUF=1 (the flat store keeps
its row lengths in one buffer, not one array per chunk). Marks: [rows, peak VmRSS, peak RssAnon,
RssAnon now] in MiB; "trims": the HeapBound trims.

    PYTHONPATH=TREE python -P bench/chat_memory_marks.py DATA.jsonl TOKENIZER.json WORK
"""
import ctypes, json, os, sys, threading, time, resource
libc = ctypes.CDLL("libc.so.6")
M = {"M_TRIM_THRESHOLD": -1, "M_MMAP_THRESHOLD": -3, "M_ARENA_MAX": -8}
for kv in os.environ.get("RIG_MALLOPT", "").split(","):
    if kv:
        k, v = kv.split("=")
        assert libc.mallopt(M[k], int(v)) == 1
data, tok, work = sys.argv[1:4]
every = int(os.environ.get("RIG_EVERY", 10000))
peak = [0, 0]; rows = [0]; marks = []
def st():
    with open("/proc/self/status") as f:
        d = {l.split(":")[0]: int(l.split()[1]) // 1024 for l in f if l.startswith(("VmRSS", "RssAnon"))}
    return d
def sample():
    nxt = every
    while True:
        d = st()
        peak[0] = max(peak[0], d["VmRSS"]); peak[1] = max(peak[1], d["RssAnon"])
        if rows[0] >= nxt:
            marks.append((nxt, peak[0], peak[1], d["RssAnon"])); nxt += every
        time.sleep(0.02)
threading.Thread(target=sample, daemon=True).start()
import packtool.packing as pk
from packtool import TokenizeConfig
from packtool.tokenize import sink
import packtool.tokenize.pipeline as pl
add = sink.CacheSink.add
def counted(self, ids, mask, lens, *a, **k):
    rows[0] += len(lens); return add(self, ids, mask, lens, *a, **k)
sink.CacheSink.add = counted
bounds = []
if os.environ.get("RIG_ONEBUF"):
    import numpy as np
    from packtool.tokenize.flat_builder import FlatTokensBuilder as FTB
    _add, _close = FTB.add, FTB.close
    def _ftb_add(self, *a, **k):
        if not hasattr(self, "_buf"):
            self._buf, self._n = np.empty(1 << 20, np.int64), 0
        _add(self, *a, **k)
        arr = self._lengths.pop()
        self._buf[self._n:self._n + arr.size] = arr
        self._n += arr.size
    def close(self, *a, **k):
        self._lengths = [self._buf[:self._n]]
        return _close(self, *a, **k)
    FTB.add, FTB.close = _ftb_add, close
if os.environ.get("RIG_SLACK"):
    pl._HEAP_SLACK = int(os.environ["RIG_SLACK"]) << 20
from packtool import heap as hp
_init = hp.HeapBound.__init__
def _i(self, *a):
    _init(self, *a); bounds.append(self)
hp.HeapBound.__init__ = _i
if os.environ.get("RIG_TRIM"):
    real = pl._encode_chunk
    def ec(*a):
        r = real(*a); libc.malloc_trim(0); return r
    pl._encode_chunk = ec
t0 = time.time()
pk.tokenize_to_cache([data], TokenizeConfig(tokenizer=tok, chat_template="chatml"), cache_dir=os.path.join(work, "cache"), progress=False)
time.sleep(0.1)
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"cfg": os.environ.get("RIG_ONEBUF", "") + os.environ.get("RIG_MALLOPT", "") + (" trim" if os.environ.get("RIG_TRIM") else "") + " " + os.environ.get("RIG_ENV",""), "rows": rows[0], "cpu": round(ru.ru_utime + ru.ru_stime, 1),
                  "wall": round(time.time() - t0, 1), "trims": [b.trims for b in bounds], "slack": pl._HEAP_SLACK >> 20, "peak_rss": peak[0], "peak_anon": peak[1], "marks": marks}))
