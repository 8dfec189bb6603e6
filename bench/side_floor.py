"""The floor of a pack with per-token side columns (issue 21): what no packing choice removes
while the input is Parquet and the slabs hold `list<fixed_size_list<int32, K>>` (FORMAT.md
"Side columns"), beside the tokens-only pack of the same input.

Each case runs in a fresh process, cases alternating (bench/pack_e2e_side.py's input):
  tokens   the whole tokens-only pack (bench/pack_e2e_side.py `tokens`): the 1.6x baseline;
  floor    for the side columns named (`--cols`):
           decode  the input's columns as packtool reads them (ParquetFile.iter_batches per row
                   group, Arrow's threads), to the flat Arrow buffers, nothing else;
           encode  the same values as slab columns, built zero-copy from those buffers
                   (`pa.FixedSizeListArray.from_arrays` + `pa.ListArray.from_arrays`, rows of
                   C tokens; pads left out, <1% here) and written with the writer's options
                   (zstd, no dictionary, no statistics, `slabs.schema.side_encoding`, row groups
                   of `slabs.shard_sizes.side_group_tokens`), by two threads (two shards, as the
                   writer runs on two cores);
Neither step packs anything: the ids, the plan, the gather and the flat store are all left
out, so tokens + decode + encode is a lower bound of the pack with those columns. CPU
seconds are user+sys of the process (all threads); load is printed before and after.

    python bench/side_floor.py --n 100000 --repeat 3 --log bench/results/side/floor_runs.jsonl
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
import time

from runlog import emit  # bench/ is on sys.path for `python bench/NAME.py`

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
C = 8192
COLS = {"support": ("support",), "floats": ("old_logprobs", "advantages"),
        "full": ("old_logprobs", "advantages", "support")}


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def decode(src: str, cols) -> tuple[list, dict]:
    """Every batch of the columns, as packtool's reader yields them (columnar_readers.parquet_batches)."""
    import pyarrow.parquet as pq
    t0, c0 = time.perf_counter(), _cpu()
    files = [os.path.join(src, f) for f in sorted(os.listdir(src))] if os.path.isdir(src) else [src]
    out = []
    for path in files:
        pf = pq.ParquetFile(path, pre_buffer=True)
        for g in range(pf.num_row_groups):
            for b in pf.iter_batches(batch_size=10_000, columns=list(cols), row_groups=[g]):
                out.append([b.column(i).flatten() for i in range(len(cols))])  # the flat token lists
    return out, dict(decode_seconds=time.perf_counter() - t0, decode_cpu=_cpu() - c0)


def _slab_column(values, width: int):
    """One slab column over the values' own buffer: rows of C tokens, K-wide rows zero-copy."""
    import numpy as np
    import pyarrow as pa
    n = len(values)  # tokens (a K-wide column: fixed_size_list entries)
    offs = np.append(np.arange(0, n, C, dtype=np.int32), np.int32(n))
    inner = pa.FixedSizeListArray.from_arrays(values.flatten(), width) if width > 1 else values
    return pa.ListArray.from_arrays(pa.array(offs), inner)


def encode(batches, cols, work: str) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from packtool.side import SideColumn
    from packtool.slabs.schema import side_encoding
    from packtool.slabs.shard_sizes import GROUP_TOKENS, side_group_tokens
    side = []
    for name, v in zip(cols, batches[0]):
        width = v.type.list_size if pa.types.is_fixed_size_list(v.type) else 1
        side.append(SideColumn(name, "int32" if width > 1 else "float32", width,
                               kind="support" if width > 1 else "values"))
    group = side_group_tokens(GROUP_TOKENS, side)
    schema = pa.schema([pa.field(c.name, pa.list_(pa.from_numpy_dtype(c.np_dtype) if c.width == 1 else
                                                   pa.list_(pa.from_numpy_dtype(c.np_dtype), c.width)))
                        for c in side])

    def shard(part, path):  # one writer thread per shard, as slabs/writer.run_shards
        with pq.ParquetWriter(path, schema, compression="zstd", write_statistics=False,
                              use_dictionary=False, column_encoding=side_encoding(side)) as w:
            for b in part:
                t = pa.Table.from_arrays([_slab_column(v, c.width) for v, c in zip(b, side)], schema=schema)
                w.write_table(t, row_group_size=max(1, group // C))
    t0, c0 = time.perf_counter(), _cpu()
    half = len(batches) // 2
    paths = [os.path.join(work, f"floor-{i}.parquet") for i in range(2)]
    with ThreadPoolExecutor(2) as ex:
        for f in [ex.submit(shard, p, q) for p, q in zip((batches[:half], batches[half:]), paths)]:
            f.result()
    r = dict(encode_seconds=time.perf_counter() - t0, encode_cpu=_cpu() - c0,
             encoded_bytes=sum(os.path.getsize(p) for p in paths))
    for p in paths:
        os.remove(p)
    return r


def floor(src: str, cols, work: str) -> dict:
    batches, r = decode(src, cols)
    r.update(encode(batches, cols, work))
    r.update(values=sum(len(v) * getattr(v.type, "list_size", 1)
                        for b in batches for v in b))
    return r


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cases", nargs="+", default=["tokens", "floats", "support", "full"])
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "packtool_bench_side"))
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--log")
    a = ap.parse_args()
    if a.case:
        from bench.pack_e2e_side import make_input, run
        src = make_input(a.n, a.work)
        if a.case == "tokens":
            r = run("tokens", src, a.work)
            r = dict(seconds=r["seconds"], cpu_seconds=r["cpu_seconds"], tokens=r["tokens"])
        else:
            r = floor(src, COLS[a.case], a.work)
        print("RESULT " + json.dumps(dict(case=a.case, n=a.n, **r)))
        return
    os.makedirs(a.work, exist_ok=True)
    for _ in range(a.repeat):
        for case in a.cases:
            load0 = os.getloadavg()
            p = subprocess.run([sys.executable, __file__, "--case", case, "--n", str(a.n), "--work", a.work],
                               capture_output=True, text=True, cwd=ROOT)
            lines = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
            if not lines:
                print(p.stdout[-2000:], p.stderr[-4000:], flush=True)
                continue
            r = json.loads(lines[-1][7:])
            r.update(load_before=load0, load_after=os.getloadavg(), time=time.strftime("%H:%M:%S"))
            emit(r, a.log)


if __name__ == "__main__":
    main()
