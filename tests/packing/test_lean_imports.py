"""A pack of a pre-tokenized Parquet file never imports pandas or pyarrow.compute: pyarrow's
`to_numpy()` and `pa.array(ndarray)` pull both in on first use (~0.5-1.3 s on 2 cores, most
of a 100k-row pack), so the pack path reads and builds arrays through packtool/arrays.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from packtool.arrays import arrow_of, list_parts, np_of

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

SCRIPT = """
import json, sys
from packtool.align import Alignment
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig
res = pack([sys.argv[1]], Alignment(capacity=512), PackingConfig("bfd", overflow="split"),
           TokenizeConfig(shape="tokens"), sys.argv[2], cache_dir=sys.argv[3], progress=False)
print(json.dumps({"pandas": "pandas" in sys.modules, "compute": "pyarrow.compute" in sys.modules,
                  "slabs": res.plan.num_slabs}))
"""


def test_pretokenized_pack_imports_neither_pandas_nor_pyarrow_compute(tmp_path):
    rng = np.random.default_rng(0)
    lens = rng.integers(1, 700, 3000)  # some over C: split
    offs = np.concatenate(([0], np.cumsum(lens))).astype(np.int32)
    ids = rng.integers(0, 50000, int(offs[-1]), dtype=np.int32)
    src = tmp_path / "t.parquet"
    pq.write_table(pa.table({"input_ids": pa.ListArray.from_arrays(offs, ids)}), src, row_group_size=700)
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(src), str(tmp_path / "o"), str(tmp_path / "c")],
                       capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["slabs"] > 0
    assert not got["pandas"] and not got["compute"], got


def test_buffer_views_equal_pyarrows_own_conversion():
    a = pa.array(np.arange(20, dtype=np.int64)).slice(3, 9)
    assert np.array_equal(np_of(a), a.to_numpy()) and np_of(a).dtype == np.int64
    c = pa.chunked_array([pa.array([1.5, 2.5], pa.float32()), pa.array([3.5], pa.float32())])
    assert np.array_equal(np_of(c), np.array([1.5, 2.5, 3.5], np.float32))
    assert np_of(pa.array([1, None])).tolist()[0] == 1  # nulls: pyarrow's own conversion
    lists = pa.array([[1, 2], [3], [], [4, 5, 6]], pa.list_(pa.int32())).slice(1, 3)
    vals, offs = list_parts(lists)
    assert vals.tolist() == [3, 4, 5, 6] and offs.tolist() == [0, 1, 1, 4]
    flags = np.array([True, False, True] * 5)
    assert arrow_of(flags).to_pylist() == flags.tolist()
    for a in (pa.array(flags), pa.array(flags).slice(3, 9), pa.array(flags).slice(7), pa.chunked_array([flags[:5], flags])):
        got = np_of(a)  # booleans from their bits (the readers' singleton flags), slices respected
        assert got.dtype == np.bool_ and got.tolist() == a.to_pylist()
    assert np_of(pa.chunked_array([], pa.bool_())).dtype == np.bool_
    assert arrow_of(np.arange(5, dtype=np.uint8)).type == pa.uint8()
