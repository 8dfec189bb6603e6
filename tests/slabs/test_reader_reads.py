"""Every consumer decodes each column of a row group once over its whole read (open, checks,
rows, report), side columns included: the checks read nothing a second time (issue 23 class 2:
a cost a user never notices). Before: inspect read the side columns, seq_lens and
cu_seqlens_padded again for its side figures, and every reader decoded tail_pad and fill_pad
at open and again with each row group. That the checks still refuse what they refused:
tests/slabs/test_consumers_refuse.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
from read_counts import count_decodes
from side_support import K
from side_support import side_output as packed  # noqa: F401  (the module's fixture)

from packtool.slabs.format import SlabManifest


def _megatron(out, groups):
    from packtool.megatron.dataset import PackedSlabDataset
    ds = PackedSlabDataset(out, grad_accum=2, row_group_cache=groups)  # every group stays decoded
    return sum(st.real_tokens for st in ds.steps(max_steps=ds.steps_per_epoch()))


def _hf(out, groups):
    from packtool.hf import SlabDataset
    ds = SlabDataset(out, row_group_cache=groups)
    return sum(int(ds[i]["input_ids"].size) for i in range(len(ds)))


def _inspect(out, groups):
    from packtool.inspection.packed import inspect_packed
    return inspect_packed(out, what_if=False)


CONSUMERS = {"megatron-dataset": _megatron, "hf": _hf, "inspect": _inspect}


@pytest.mark.parametrize("consumer", list(CONSUMERS))
def test_each_column_is_decoded_once_per_row_group(packed, consumer, monkeypatch):
    sm = SlabManifest.read(packed)
    files = [pq.ParquetFile(sm.shard_path(i)) for i in range(len(sm.shards))]
    groups = sum(f.num_row_groups for f in files)
    columns = files[0].schema_arrow.names
    assert groups >= 3 and {"lp", "sup"} <= set(columns)
    seen = count_decodes(monkeypatch)
    CONSUMERS[consumer](packed, groups)
    assert dict(seen) == {c: groups for c in columns}


def _direct(out: str):
    """The side figures counted straight from the whole table, row by row."""
    t = pq.read_table(out)
    n = real_n = 0
    fill, on_real, odd = {"lp": 0, "sup": 0}, {"lp": 0, "sup": 0}, [0, 0]
    for row in t.to_pylist():
        T = len(row["input_ids"])
        real = np.zeros(T, bool)
        for a, m in zip(row["cu_seqlens_padded"][:-1], row["seq_lens"]):
            real[a:a + m] = True
        lp = np.asarray(row["lp"], np.float32)
        odd[0] += int(np.isnan(lp).sum())
        odd[1] += int(np.isinf(lp).sum())
        for k, f in (("lp", lp == 0.0), ("sup", (np.asarray(row["sup"]).reshape(T, K) == -1).all(axis=1))):
            fill[k] += int(f.sum())
            on_real[k] += int((f & real).sum())
        n, real_n = n + T, real_n + int(real.sum())
    return n, real_n, fill, on_real, odd


def test_inspect_side_figures_from_the_checked_groups(packed):
    """The figures inspect now takes from the groups the checks decoded are the whole table's."""
    r = _inspect(packed, 0)
    n, real_n, fill, on_real, odd = _direct(packed)
    got = {c.name: c for c in r.side_columns}
    assert set(got) == {"lp", "sup"}
    for name, c in got.items():
        assert (c.positions, c.real_tokens, c.fill_positions, c.fill_on_real) == (n, real_n, fill[name], on_real[name])
    assert (got["lp"].nan, got["lp"].inf, got["sup"].nan, got["sup"].inf) == (odd[0], odd[1], 0, 0) == (1, 1, 0, 0)


# --- bench/read_check.py's "checks off" switches every check off, and only the checks --------

def _bench(monkeypatch):
    import importlib.util
    import os
    import sys
    path = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "read_check.py")
    spec = importlib.util.spec_from_file_location("read_check_bench", path)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the bench puts bench/ first: undone after the test
    spec.loader.exec_module(mod)
    return mod


def _calls_into(files):
    """(file, name) of the functions of `files` called while the context runs (a profile hook)."""
    import contextlib
    import sys

    @contextlib.contextmanager
    def run():
        called: set[tuple[str, str]] = set()

        def hook(frame, event, arg):
            if event == "call" and frame.f_code.co_filename in files:
                called.add((frame.f_code.co_filename, frame.f_code.co_name))
        sys.setprofile(hook)
        try:
            yield called
        finally:
            sys.setprofile(None)
    return run()


def test_the_bench_lists_every_check_function(monkeypatch):
    import importlib
    import inspect
    from packtool.slabs.reader import NULLS_ONLY, SEGMENTS
    bench = _bench(monkeypatch)  # the fixture's: the bench's sys.path entries go with the test
    for modname, listed in bench.CHECKS.items():
        mod = importlib.import_module(modname)
        public = {n for n, f in vars(mod).items() if n.startswith("check_") and inspect.isfunction(f)
                  and f.__module__ == modname}
        assert public <= set(listed), f"{modname}: {sorted(public - set(listed))} not switched off by the bench"
    assert {c for name in bench.CHECK_READS for c in {"SEGMENTS": SEGMENTS, "NULLS_ONLY": NULLS_ONLY}[name]} \
        == {*SEGMENTS, *NULLS_ONLY}


@pytest.mark.parametrize("checks", [True, False])
def test_checks_off_runs_no_check_and_reads_only_what_rows_need(packed, checks, monkeypatch):
    """Off: no code of slabs/check.py nor the manifest's field checks runs through a training
    read (Megatron dataset epoch, hf items), no column only the checks use is read, and the
    rows are the same; on (the control): every listed check runs."""
    import packtool.slabs.check as check
    import packtool.slabs.check_side as check_side
    import packtool.slabs.fields as fields
    import packtool.slabs.format as fmt
    import packtool.slabs.numbers as numbers
    import packtool.slabs.token_pass as token_pass
    from packtool.megatron.dataset import PackedSlabDataset  # noqa: F401  (imported before install)
    sm = SlabManifest.read(packed)
    groups = sum(pq.ParquetFile(sm.shard_path(i)).num_row_groups for i in range(len(sm.shards)))
    columns = pq.ParquetFile(sm.shard_path(0)).schema_arrow.names
    want = _megatron(packed, groups), _hf(packed, groups)
    bench = _bench(monkeypatch)
    bench.install(checks, monkeypatch.setattr)
    seen = count_decodes(monkeypatch)
    manifest_files = (fmt.__file__, fields.__file__, numbers.__file__)
    with _calls_into({check.__file__, check_side.__file__, token_pass.__file__, *manifest_files}) as called:
        got = _megatron(packed, groups), _hf(packed, groups)
    assert got == want
    listed = {n for names in bench.CHECKS.values() for n in names}
    # all of check.py and its token pass; of the manifest's modules (its format, field table, ranges), their checks
    ran_checks = {n for f, n in called if f not in manifest_files or "check" in n}
    only_checks = {"source_index", "chunk_index", "cp_offsets", "source_offset", "slab_index", "singleton"}
    if checks:
        assert listed <= ran_checks
        assert set(seen) == set(columns)
    else:
        assert ran_checks == set(), f"still run with the checks off: {sorted(ran_checks)}"
        assert set(seen) == set(columns) - only_checks


# S35-4: every consumer's open and reads in one fresh interpreter. pyarrow's to_numpy() imports
# pandas (and with it pyarrow.compute) on first use, ~165 ms of a reader's start; pyarrow keeps
# that import state per process (its pandas shim tries once), so no in-process test can tell
# whether a reader triggers it once any other test in the worker has: one subprocess for all
LEAN = """
import json, sys
out, seen = sys.argv[1], {}
def mark(stage):
    seen[stage] = sorted(m for m in ("pandas", "pyarrow.compute") if m in sys.modules)
from packtool.slabs import SlabIndex, SlabManifest, SlabReader
sm = SlabManifest.read(out)
reader = SlabReader(sm, SlabIndex.build(sm))
mark("SlabReader open")
rows = [reader.row(i) for i in range(len(reader.index))]
assert rows and all(set(r.side) == {"lp", "sup"} for r in rows)
mark("SlabReader rows")
from packtool.megatron.dataset import PackedSlabDataset
ds = PackedSlabDataset(out, grad_accum=2)
sum(st.real_tokens for st in ds.steps(max_steps=ds.steps_per_epoch()))
mark("megatron dataset")
from packtool.hf import SlabDataset
h = SlabDataset(out)
[h[i] for i in range(len(h))]
mark("hf")
from packtool.inspection.packed import inspect_packed
inspect_packed(out, what_if=False)
mark("inspect")
print(json.dumps(seen))
"""


def test_no_consumer_imports_pandas_or_pyarrow_compute(packed):
    pytest.importorskip("torch")
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    r = subprocess.run([sys.executable, "-c", LEAN, packed], capture_output=True, text=True, cwd=root, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(seen) == 5 and not any(seen.values()), seen
