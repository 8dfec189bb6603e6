"""Per-phase CPU of one pre-tokenized pack (bench/pack_e2e_pretok.py's packtool case) in one tree:
python phase.py TREE N WORK -> a RESULT line: process CPU / wall of the main-thread phases and the
summed thread CPU of the functions writer threads run, the minor faults and glibc trims of the call. EXP=nowh (no
writing_heap) and EXP=nocheck (no HeapBound trims in the write) take the class-8 write measures out (heap_exp.jsonl)."""
import functools, json, os, shutil, sys, threading, time
tree, n, work = sys.argv[1], int(sys.argv[2]), sys.argv[3]
sys.path.insert(0, tree)
import packtool  # noqa: F401  (first: its Arrow pool, as the CLI)
import importlib
from packtool.align import Alignment
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig
acc, lock = {}, threading.Lock()
import contextlib, resource
import packtool.heap as _heap, packtool.slabs.writer as _writer
EXP = os.environ.get("EXP", "")
if "nowh" in EXP:  # no trim threshold change during the write
    _writer.writing_heap = contextlib.nullcontext
if "nocheck" in EXP:
    _heap.HeapBound.check = lambda self: None
_trims = [0]
_t = _heap.trim
def _counted():
    _trims[0] += 1; _t()
_heap.trim = _counted
for _m in list(sys.modules.values()):
    if getattr(_m, "__name__", "").startswith("packtool") and getattr(_m, "trim", None) is _t:
        _m.trim = _counted

def wrap(modname, attr, kind):
    mod = importlib.import_module(modname)
    owner, name = mod, attr
    if "." in attr:
        cls, name = attr.split(".")
        owner = getattr(mod, cls)
    fn = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    raw = fn.__func__ if isinstance(fn, (classmethod, staticmethod)) else fn
    def w(*a, **k):
        c0 = time.thread_time() if kind == "thread" else time.process_time()
        t0 = time.perf_counter()
        try:
            return raw(*a, **k)
        finally:
            c = (time.thread_time() if kind == "thread" else time.process_time()) - c0
            with lock:
                e = acc.setdefault(attr.split(".")[-1], [0.0, 0.0, 0])
                e[0] += c; e[1] += time.perf_counter() - t0; e[2] += 1
    new = classmethod(w) if isinstance(fn, classmethod) else w
    setattr(owner, name, new)
    if owner is mod:
        for m in list(sys.modules.values()):
            if getattr(m, "__name__", "").startswith("packtool") and getattr(m, name, None) is fn:
                setattr(m, name, w)

for spec in [("packtool.packing", "tokenize_to_cache", "proc"), ("packtool.planning.spill", "plan_spilled", "proc"),
             ("packtool.slabs.routed", "SpilledShards.route", "proc"), ("packtool.slabs.routed", "write_spilled", "proc"),
             ("packtool.packing", "write_output", "proc"), ("packtool.slabs.writer", "write_shard_file", "thread"),
             ("packtool.tokenize.checksum", "shard_checksum", "thread"), ("packtool.slabs.routed", "put_in_order", "thread"),
             ("packtool.slabs.routed", "RoutedSlabWriter.batch", "thread")]:
    try:
        wrap(*spec)
    except (AttributeError, KeyError, ImportError) as e:
        print("no", spec, e, file=sys.stderr)
sys.path.insert(0, os.path.join(tree, "bench"))
from bench.pack_e2e import _make_input
src = _make_input(n, os.path.dirname(work.rstrip("/")) or ".")
args = (Alignment(capacity=8192), PackingConfig("bfd", overflow="split"), TokenizeConfig(shape="tokens"))
os.makedirs(work, exist_ok=True)
import pyarrow as pa, pyarrow.parquet as pq
tiny = os.path.join(work, "warm.parquet")
pq.write_table(pa.table({"input_ids": pa.array([[1, 2, 3]] * 10, pa.list_(pa.int32()))}), tiny)
pack([tiny], *args, os.path.join(work, "warm-out"), cache_dir=os.path.join(work, "warm-cache"), overwrite=True)
acc.clear()
cache, out = os.path.join(work, "c"), os.path.join(work, "o")
shutil.rmtree(cache, ignore_errors=True); shutil.rmtree(out, ignore_errors=True)
os.sync()
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
_trims[0] = 0
t0, c0 = time.perf_counter(), time.process_time()
pack([src], *args, out, cache_dir=cache)
r = {"tree": tree, "wall": time.perf_counter() - t0, "cpu": time.process_time() - c0,
     "exp": EXP, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0, "trims": _trims[0], "phases": {k: [round(v[0], 4), round(v[1], 4), v[2]] for k, v in acc.items()}}
shutil.rmtree(cache, ignore_errors=True); shutil.rmtree(out, ignore_errors=True)
print("RESULT " + json.dumps(r))
