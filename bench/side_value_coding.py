"""What Parquet costs per value for a K-wide int32 side column, by layout (issue 21's 1.6x floor).

The first row groups of bench/pack_e2e_side.py's input (`support`: a list of 20-wide
fixed-size lists per row) are written back in each layout, zstd and uncompressed, without
dictionary or statistics (the slab writer's options), then read back; CPU ns per value of the
write (encode) and of the best of three whole-file reads (decode):

  nested          list<list<int32>> (a list of K-long lists, as an input may hold it)
  fsl             list<fixed_size_list<int32, K>> (FORMAT.md's slab column; an input may too)
  flat_tokK       list<int32> of T x K values per row (no inner lists)
  plain_int32     the values as a flat int32 column (no list levels: no row structure left)
  fsb_row         fixed_size_binary(4K) per token (opaque to other readers)

    python bench/side_value_coding.py /tmp/packtool_bench_side/side_lm2_100000.parquet --row-groups 2
"""
from __future__ import annotations

import argparse
import os
import resource
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def layouts(sup: pa.ListArray, k: int) -> dict[str, pa.Table]:
    inner = sup.flatten()
    vals = inner.flatten()
    offs = pa.array([o * k for o in sup.offsets.to_pylist()], pa.int32())
    fsl = pa.FixedSizeListArray.from_arrays(vals, k)
    nested = pa.ListArray.from_arrays(sup.offsets, pa.ListArray.from_arrays(
        pa.array(range(0, len(vals) + 1, k), pa.int32()), vals))
    fsb = pa.FixedSizeBinaryArray.from_buffers(pa.binary(4 * k), len(inner), [None, vals.buffers()[1]],
                                               offset=vals.offset // k)
    return {"nested": pa.table({"s": nested}), "fsl": pa.table({"s": pa.ListArray.from_arrays(sup.offsets, fsl)}),
            "flat_tokK": pa.table({"s": pa.ListArray.from_arrays(offs, vals)}),
            "plain_int32": pa.table({"s": vals}), "fsb_row": pa.table({"s": fsb})}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("--column", default="support")
    ap.add_argument("--row-groups", type=int, default=2)
    a = ap.parse_args()
    pf = pq.ParquetFile(a.src)
    sup = pf.read_row_groups(list(range(a.row_groups)), columns=[a.column]).column(0).combine_chunks()
    k = sup.type.value_type.list_size
    n = len(sup.flatten().flatten())
    print(f"# {n:,} values (K {k}), load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as d:
        for name, table in layouts(sup, k).items():
            for comp in ("zstd", "none"):
                path = os.path.join(d, f"{name}_{comp}.parquet")
                c0 = _cpu()
                pq.write_table(table, path, compression=comp, use_dictionary=False, write_statistics=False)
                enc = _cpu() - c0
                dec = 1e9
                for _ in range(3):
                    c0 = _cpu()
                    pq.read_table(path)
                    dec = min(dec, _cpu() - c0)
                print(f"{name:12s} {comp:5s} encode {enc / n * 1e9:5.1f} ns  decode {dec / n * 1e9:5.1f} ns  "
                      f"{os.path.getsize(path) / 1e6:6.0f} MB", flush=True)
    print(f"# load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
