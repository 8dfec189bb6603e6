"""What a consumer's checks cost (BENCHMARKS.md, "Consumer checks"): the first epoch of the
Megatron dataset (`PackedSlabDataset`: open, then every step's micro-batches built on CPU)
with every check a reader runs on (`CHECKS`: the manifest's field checks, `slabs.check`'s),
and with them replaced by no-ops and the columns only they read left unread (`CHECK_READS`),
in fresh processes, alternating on/off. "Time inside the checks" counts the checks' own
calls; the check-only reads at open show in on/off wall only. The output: the real lengths of ../shared/data x --times (mistral token
counts), random ids, written by the real writer at pack's default shard and row-group sizes
(as bench/verify_speed.py). The shards stay in the page cache between runs, so no disk time
hides the checksum: the worst case for its share.

    python bench/read_check.py [--runs 5] [--times 3] [--work /tmp/packtool-bench-readcheck]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

# every check a reader runs (FORMAT.md, "What a reader checks"), by the module that defines it:
# the manifest's field checks at open (slabs.fields' table, format's numbers), then check.py's (open, per row group, nulls, side lengths) and check_side.py's (NaN / inf).
# tests/slabs/test_read_check_bench.py holds the list to every check_* function of these modules
CHECKS = {"packtool.slabs.fields": ("check_fields", "check_side_counts"),
          "packtool.slabs.format": ("check_numbers",),
          "packtool.slabs.check": ("check_output", "check_segment_counts", "check_coverage", "check_counts",
                                   "check_checksum", "check_nulls", "check_side_lengths", "check_group"),
          "packtool.slabs.check_side": ("check_side_nonfinite",)}
# the open scan's columns only the checks use (slabs/reader.py): "off" leaves them unread
CHECK_READS = ("SEGMENTS", "NULLS_ONLY")


def install(checks: bool, set_attr=setattr) -> dict[str, float]:
    """Every check of CHECKS wrapped, wherever a module took it by name (slabs.reader imports
    check.py's): timed when `checks`, a no-op otherwise, and then CHECK_READS emptied too.
    Returns the seconds spent inside each check, filled as they run. `set_attr`: a test's
    monkeypatch.setattr, so that the change is undone."""
    import importlib

    import packtool.slabs.reader as reader
    spent: dict[str, float] = {}
    for modname, names in CHECKS.items():
        mod = importlib.import_module(modname)
        for name in names:
            fn = getattr(mod, name, None)
            if fn is None:  # an older tree (before/after runs) lacks the newer checks
                continue
            spent[name] = 0.0

            def timed(*a, _fn=fn, _name=name, **kw):
                t = time.perf_counter()
                try:
                    return _fn(*a, **kw) if checks else None
                finally:
                    spent[_name] += time.perf_counter() - t
            for m in [m for k, m in list(sys.modules.items()) if k.startswith("packtool") and m is not None]:
                if getattr(m, name, None) is fn:
                    set_attr(m, name, timed)
    # an older tree's scan cannot do without them (it had no check_nulls: nulls checked inline)
    if not checks and "check_nulls" in spent:
        for name in CHECK_READS:
            set_attr(reader, name, ())
    return spent


def make(work: str, times: int) -> str:
    import numpy as np

    from verify_speed import CONFIGS, VOCAB, real_lengths, source_store

    from packtool.packing import manifest_stats
    from packtool.planning.core import plan
    from packtool.planning.summary import plan_summary
    from packtool.slabs.format import build_manifest, write_manifest
    from packtool.slabs.names import manifest_file
    from packtool.slabs.writer import write_shards
    out = os.path.join(work, f"packed-x{times}")
    if manifest_file(out) if os.path.isdir(out) else None:
        return out
    lengths = real_lengths(times)
    tokens = source_store(os.path.join(work, f"source-x{times}"), lengths)
    align, packing = CONFIGS["tp1-cp1"]
    p = plan(np.asarray(lengths), align, packing)
    os.makedirs(out, exist_ok=True)
    shards = write_shards(p, tokens, out, 0)
    stats = manifest_stats(plan_summary(p), sum(s.loss_tokens for s in shards))
    tok = {"path": "synthetic", "pad_id": 0, "bos_id": None, "eos_id": None, "vocab_size": VOCAB}
    write_manifest(out, build_manifest(p, shards, stats, tok, {"fingerprint": "bench", "files": []}))
    return out


def one(out: str, checks: bool) -> dict:
    """One process: open + the first epoch; with checks, the time spent inside them."""
    from packtool.megatron.dataset import PackedSlabDataset  # imported first: install finds every taker
    spent = install(checks)
    t0 = time.perf_counter()
    ds = PackedSlabDataset(out, grad_accum=8)
    t1 = time.perf_counter()
    steps = tokens = 0
    for st in ds.steps(max_steps=ds.steps_per_epoch()):
        steps += 1
        tokens += st.real_tokens
    t2 = time.perf_counter()
    return {"checks": checks, "open_s": t1 - t0, "epoch_s": t2 - t1, "total_s": t2 - t0, "steps": steps,
            "real_tokens": tokens, "in_checks_s": sum(spent.values()) if checks else 0.0,
            "by_check_s": {k: round(v, 4) for k, v in spent.items()} if checks else {}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--times", type=int, default=3)
    ap.add_argument("--work", default="/tmp/packtool-bench-readcheck")
    ap.add_argument("--one", nargs=2, metavar=("OUT", "ON|OFF"))
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a.one[0], a.one[1] == "on")))
        return
    os.makedirs(a.work, exist_ok=True)
    out = make(a.work, a.times)
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out) if f.endswith(".parquet"))
    print(f"{platform.node()} · {os.cpu_count()} cpus · load {os.getloadavg()[0]:.2f} · {out} {size / 1e6:.0f} MB")
    subprocess.run([sys.executable, __file__, "--one", out, "on"], check=True, capture_output=True)  # warm: numba cache, page cache
    rows = {True: [], False: []}
    for i in range(a.runs):
        for on in ((True, False) if i % 2 == 0 else (False, True)):
            r = subprocess.run([sys.executable, __file__, "--one", out, "on" if on else "off"], check=True,
                               capture_output=True, text=True)
            rows[on].append(json.loads(r.stdout.strip().splitlines()[-1]))
    med = lambda xs, k: statistics.median(x[k] for x in xs)  # noqa: E731
    for on in (True, False):
        xs = rows[on]
        print(f"checks {'on ' if on else 'off'}: total {med(xs, 'total_s'):.2f} s (spread {min(x['total_s'] for x in xs):.2f}"
              f"-{max(x['total_s'] for x in xs):.2f}), open {med(xs, 'open_s'):.2f} s, epoch {med(xs, 'epoch_s'):.2f} s, "
              f"{xs[0]['steps']} steps, {xs[0]['real_tokens']:,} real tokens")
    on, off = rows[True], rows[False]
    share = statistics.median(x["in_checks_s"] / x["total_s"] for x in on)
    print(f"time inside the checks: median {statistics.median(x['in_checks_s'] for x in on):.2f} s = {share:.1%} "
          f"of the checked first epoch; by check: {on[len(on) // 2]['by_check_s']}")
    print(f"on/off wall: {med(on, 'total_s') / med(off, 'total_s') - 1:+.1%} · load after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
