import os, sys, shutil
sys.path.insert(0, "/work/wt-lead"); sys.path.insert(1, "/work/wt-lead/bench")
import packtool
import pyarrow as pa
import numpy as np
import chat_memory as cm
import packtool.packing as pk
import packtool.slabs.writer as wr
ours = [0, 0]
orig = wr._buffer
def counted(n, dtype):
    b = n * np.dtype(dtype).itemsize; ours[0] += b; ours[1] += 1
    return orig(n, dtype)
wr._buffer = counted
from packtool.align import Alignment
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig
rows = sys.argv[1]
work = f"/work/m39/cache/{rows}"
out = "/work/m39/alloc_out"; shutil.rmtree(out, ignore_errors=True)
tok = os.path.join(cm.SHARED, "tokenizers", "gpt2", "tokenizer.json")
pool = pa.default_memory_pool()
t0, n0 = pool.total_bytes_allocated(), pool.num_allocations()
pk.pack([work + "/in.jsonl"], Alignment(capacity=4096), PackingConfig("bfd", overflow="split"),
        TokenizeConfig(tokenizer=tok, chat_template="chatml"), out, cache_dir=work + "/cache", progress=False)
import glob, pyarrow.parquet as pq
toks = sum(pq.ParquetFile(f).metadata.num_rows for f in glob.glob(out + "/*.parquet"))
print(pool.backend_name, "pool total MiB", (pool.total_bytes_allocated() - t0) >> 20, "allocs", pool.num_allocations() - n0,
      "ours MiB", ours[0] >> 20, "ours n", ours[1], "slabs", toks)
shutil.rmtree(out, ignore_errors=True)
