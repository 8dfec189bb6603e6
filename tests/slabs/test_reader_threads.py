"""One SlabReader shared by threads (CP ranks simulated as threads in the megatron tests, a
threaded loader) returns what a reader used alone returns. Unlocked, the shared ParquetFile
and the row-group LRU raced: "ReadRangeCache did not find matching cache entry" or rows
from an evicted group."""
from __future__ import annotations

import threading

import numpy as np
from slab_support import write_pack

from packtool.align import Alignment
from packtool.slabs.format import SlabManifest
from packtool.slabs.reader import SlabIndex, SlabReader


def test_a_reader_shared_by_threads_reads_what_one_alone_reads(tmp_path):
    rng = np.random.default_rng(5)
    out, _ = write_pack(str(tmp_path), rng.integers(2, 60, 400), Alignment(capacity=128),
                        shard_tokens=2048, group_tokens=128)
    man = SlabManifest.read(out)
    index = SlabIndex.build(man)
    n = len(index)
    assert n > 40 and len(set(index.row_group.tolist())) > 4
    want = [SlabReader(man, index).row(i).input_ids.copy() for i in range(n)]
    shared = SlabReader(man, index, cache=1)  # every other read evicts: the most contention
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        order = np.random.default_rng(seed).integers(0, n, 600)
        try:
            for i in order:
                got = shared.row(int(i)).input_ids
                if not np.array_equal(got, want[i]):
                    raise AssertionError(f"slab {i}: a shared reader returned another slab's tokens")
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
