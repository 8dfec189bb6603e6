import os, sys, shutil, threading
sys.path.insert(0, "/work/wt-lead"); sys.path.insert(1, "/work/wt-lead/bench")
import packtool
import pyarrow as pa
import chat_memory as cm
import packtool.packing as pk
import packtool.planning.spill as spill_mod
import packtool.slabs.routed as routed
import packtool.slabs.writer as wr
pool = pa.default_memory_pool()
acc = {}
lock = threading.Lock()
def tagged(name, f):
    def g(*a, **k):
        t0 = pool.total_bytes_allocated()
        try: return f(*a, **k)
        finally:
            with lock: acc[name] = acc.get(name, 0) + pool.total_bytes_allocated() - t0
    return g
spill_mod.plan_spilled = tagged("plan", spill_mod.plan_spilled)
routed.SpilledShards.route = classmethod(tagged("route", routed.SpilledShards.route.__func__))
routed.write_spilled = tagged("write_spilled", routed.write_spilled)
routed.put_in_order = tagged("order", routed.put_in_order)
import pyarrow.parquet as pq
pq.ParquetWriter.write_batch = tagged("encode", pq.ParquetWriter.write_batch)
pq.ParquetWriter.close = tagged("close", pq.ParquetWriter.close)
wr.SlabWriter.batch = tagged("batch", wr.SlabWriter.batch)
wr.ShardSlabWriter.batch = tagged("shardbatch", wr.ShardSlabWriter.batch)
pk.tokenize_to_cache = tagged("tokenize_to_cache", pk.tokenize_to_cache)
from packtool.align import Alignment
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig
rows = sys.argv[1]
work = f"/work/m39/cache/{rows}"
out = "/work/m39/alloc_out"; shutil.rmtree(out, ignore_errors=True)
tok = os.path.join(cm.SHARED, "tokenizers", "gpt2", "tokenizer.json")
t0 = pool.total_bytes_allocated()
pk.pack([work + "/in.jsonl"], Alignment(capacity=4096), PackingConfig("bfd", overflow="split"),
        TokenizeConfig(tokenizer=tok, chat_template="chatml"), out, cache_dir=work + "/cache", progress=False)
print("total", (pool.total_bytes_allocated() - t0) >> 20, {k: v >> 20 for k, v in acc.items()})
shutil.rmtree(out, ignore_errors=True)
