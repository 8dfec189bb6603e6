"""Peak RSS by stage of a warm-cache raw chat pack, in process (s38 writers, loaded box).

    python stage_peaks.py ROWS CACHE_ROOT TREE [--smaps DIR]

The input and its tokenized cache are made once under CACHE_ROOT/ROWS (the first call
tokenizes); each call then packs from that warm cache with TREE's packtool, the library call
`pack` as the command makes it, and samples VmRSS every 5 ms filed under the stage running:
plan (plan_spilled), route (SpilledShards.route), write (write_spilled), order (put_in_order,
in the main thread during the write), other. Prints one
JSON line: per stage its peak RSS and Arrow's pool bytes at that peak."""
import json, os, shutil, sys, threading, time
rows, root, tree = int(sys.argv[1]), sys.argv[2], sys.argv[3]
smaps = sys.argv[5] if len(sys.argv) > 5 and sys.argv[4] == "--smaps" else None
sys.path.insert(0, tree)
sys.path.insert(1, os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), *[".."] * 5)))
import packtool  # noqa: F401  jemalloc, as the command
import chat_memory as cm
work = os.path.join(root, str(rows))
os.makedirs(work, exist_ok=True)
data = os.path.join(work, "in.jsonl")
if not os.path.exists(data):
    cm.make_data(data, rows, cm.REAL_CHATS)
stage, peaks, at_peak = ["other"], {}, {}
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 >> 20
def sample():
    import pyarrow as pa
    while True:
        r, s = rss(), stage[0]
        if r > peaks.get(s, (0,))[0]:
            peaks[s] = (r, pa.default_memory_pool().bytes_allocated() >> 20)
            if s in ("write", "order"):  # by kind of mapping, at each new peak of the write
                from memory_timeline import classes
                at_peak[s] = classes()
            if smaps:
                os.makedirs(smaps, exist_ok=True)
                with open("/proc/self/smaps") as f, open(os.path.join(smaps, s + ".smaps"), "w") as g:
                    g.write(f.read())
        time.sleep(0.005)
import packtool.planning.spill as spill_mod
import packtool.slabs.routed as routed
import packtool.packing as pk
def tagged(name, f):
    def g(*a, **k):
        old = stage[0]; stage[0] = name
        try: return f(*a, **k)
        finally: stage[0] = old
    return g
spill_mod.plan_spilled = tagged("plan", spill_mod.plan_spilled)
routed.SpilledShards.route = classmethod(tagged("route", routed.SpilledShards.route.__func__))
_write = tagged("write", routed.write_spilled)
start = {}
def write_spilled(*a, **k):  # what is resident as the write starts, by kind of mapping
    from memory_timeline import classes
    start.update(classes(), rss=rss())
    return _write(*a, **k)
routed.write_spilled = write_spilled
routed.put_in_order = tagged("order", routed.put_in_order)  # main thread, while writers write
from packtool.align import Alignment
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig
tok = os.path.join(cm.SHARED, "tokenizers", "gpt2", "tokenizer.json")
out = os.path.join(work, "out")
shutil.rmtree(out, ignore_errors=True)
threading.Thread(target=sample, daemon=True).start()
t0 = time.time()
pk.pack([data], Alignment(capacity=4096), PackingConfig("bfd", overflow="split"),
        TokenizeConfig(tokenizer=tok, chat_template="chatml"), out, cache_dir=os.path.join(work, "cache"), progress=False)
time.sleep(0.05)
import resource
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"cpu_s": round(ru.ru_utime + ru.ru_stime, 2), "minflt": ru.ru_minflt,
                  "je_conf": os.environ.get("JE_ARROW_MALLOC_CONF", "packtool's"), "rows": rows, "tree": tree, "wall_s": round(time.time() - t0, 2), "labelled": "loaded",
                  "load_1min": round(os.getloadavg()[0], 1), "utc": time.strftime("%H:%M:%S", time.gmtime()),
                  "write_start": start, "at_peak": at_peak, **{f"{s}_rss": v[0] for s, v in peaks.items()}, **{f"{s}_arrow": v[1] for s, v in peaks.items()}}))
shutil.rmtree(out, ignore_errors=True)
