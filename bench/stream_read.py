"""What reading a `datasets.IterableDataset` without features costs (L3, stop 47): the same
rows (chat rows, two turns each) as a stream of Python rows (`from_generator`) and as a stream
whose source yields Arrow tables (an Arrow-formatted batched map), read by the tokenize stage's
reader (`late_columns.stream_batches`, every key judged) and, for the Arrow stream, through
datasets' Python rows as before this stop (`_row_tables`). Best of --runs, rows per second.

    python bench/stream_read.py [--rows 50000] [--runs 3]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    import datasets
    import pyarrow as pa

    from packtool.tokenize import late_columns
    datasets.disable_progress_bars()
    rows = [{"messages": [{"role": "user", "content": f"q {i} " + "lorem ipsum " * 10},
                          {"role": "assistant", "content": "dolor sit amet " * 12}], "id": i} for i in range(a.rows)]
    table = pa.Table.from_pylist(rows)
    streams = {"Python rows": datasets.IterableDataset.from_generator(lambda: iter(rows)),
               "Arrow tables": datasets.Dataset(table).to_iterable_dataset().with_format("arrow").map(
                   lambda t: t, batched=True)}

    class Judge:  # every key seen, none refused: the reader's own cost
        known = {"messages", "id"}

        def block(self, t, row0):
            pass

    def read(ds, reader) -> float:
        best = float("inf")
        for _ in range(a.runs):
            t0, n = time.perf_counter(), 0
            for b in reader(ds):
                n += b.num_rows
            assert n == a.rows, n
            best = min(best, time.perf_counter() - t0)
        return a.rows / best

    now = lambda ds: late_columns.stream_batches(ds, 1024, ["messages"], Judge(), "x")  # noqa: E731
    for name, ds in streams.items():
        print(f"{name:13s} stream_batches     {read(ds, now):>10,.0f} rows/s")
    rows_way = lambda ds: late_columns._row_tables(ds, 1024, "x")  # noqa: E731
    print(f"{'Arrow tables':13s} as Python rows     {read(streams['Arrow tables'], rows_way):>10,.0f} rows/s (before)")


if __name__ == "__main__":
    main()
