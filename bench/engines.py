"""Local vs Ray engine: `pack` end to end on every record of ../shared/data, replicated.

Inputs: the 12 data files of ../shared/data (GSM8K train/test as prompt/response fields,
GPTeacher x3 Alpaca, Taskmaster-4 chat, FastChat ShareGPT, PEPs and the Rust book as text,
HumanEval and MT-Bench rewritten once into prompt/completion and text rows because their
columns match no shape), copied `--copies` times (28,188 records per copy).
Tokenizer mistral-7b-v0.1 (mistral chat template), tp=4 cp=2 sp blockwise FP8, C=8192, bfd,
--overflow split. Every run starts from an empty tokenized cache, so tokenizing is counted.
The Ray engine runs on a local Ray started by the same process (ray.init(num_cpus=cores)):
its start-up is timed apart, then a cold run (fresh worker processes) and a warm one.

    python bench/engines.py [--copies 10] [--write]   (--write: update BENCHMARKS.md)
    python bench/engines.py --plan-memory 10,30,100 [--write]

--plan-memory: the driver's peak RSS while planning N million synthetic lengths (drawn from the
real mistral lengths of ../shared/data), global `plan()` vs sharded planning on a local Ray
(shard packs as Ray tasks; the driver also builds what the write step needs from it: the
per-shard routing arguments and per-output-shard slab specs). Each run is a fresh process;
bytes per sequence = (peak RSS - RSS after imports, Ray start and a warm-up plan) / N.
"""
from __future__ import annotations

import argparse
import filecmp
import gzip
import json
import os
import platform
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "data")
FILES = ["gsm8k/train.jsonl", "gsm8k/test.jsonl", "gpteacher/codegen-instruct.json",
         "gpteacher/roleplay-simple-deduped-roleplay-instruct.json",
         "gpteacher/toolformer-dedupe-only-dataset.json", "taskmaster4/tm4_coffee_dialogs_chat.jsonl.gz",
         "fastchat/dummy_conversation.json", "peps/peps_pd_cc0.jsonl.gz", "rust_book/rust_book_src.jsonl.gz"]


def prepare(tmp: str) -> list[str]:
    """The 12 files of one copy; HumanEval and MT-Bench rewritten into shapes packtool reads."""
    he = os.path.join(tmp, "humaneval.jsonl")
    with gzip.open(os.path.join(DATA, "humaneval/HumanEval.jsonl.gz"), "rt") as f, open(he, "w") as o:
        for line in f:
            r = json.loads(line)
            o.write(json.dumps({"prompt": r["prompt"], "completion": r["canonical_solution"]}) + "\n")
    mt = os.path.join(tmp, "mt_bench.jsonl")
    with open(os.path.join(DATA, "fastchat/mt_bench_question.jsonl")) as f, open(mt, "w") as o:
        for line in f:
            o.write(json.dumps({"text": "\n\n".join(json.loads(line)["turns"])}) + "\n")
    return [os.path.join(DATA, p) for p in FILES] + [he, mt]


def replicate(files: list[str], copies: int, tmp: str) -> list[str]:
    """`copies` real copies of every file, each copy in its own folder: packtool refuses one
    file listed twice (it would be packed twice without a word)."""
    out = []
    for k in range(copies):
        d = os.path.join(tmp, f"copy{k:02d}")
        os.makedirs(d, exist_ok=True)
        for f in files:
            dst = os.path.join(d, os.path.basename(f))
            if not os.path.exists(dst):
                shutil.copyfile(f, dst)
            out.append(dst)
    return out


def same_output(a: str, b: str) -> bool:
    names = sorted(os.listdir(a))
    return names == sorted(os.listdir(b)) and all(
        filecmp.cmp(os.path.join(a, n), os.path.join(b, n), shallow=False) for n in names)


SHARDED_ROWS = 65536
REAL_LENGTHS = os.path.join(DATA, "token_lengths_by_source.json")
PLAN_SHARD_ROWS = 1 << 20


def real_lengths():
    import numpy as np
    d = json.load(open(REAL_LENGTHS))
    return np.concatenate([np.asarray(v["mistral-7b-v0.1"]["lengths"], np.int64) for v in d["sources"].values()])


class SyntheticLengths:
    """Lengths of one shard drawn from the real distribution, generated where the task runs."""

    def __init__(self, pool, seed: int, n: int):
        self.pool, self.seed, self.n = pool, seed, n

    def __call__(self):
        import numpy as np
        return np.random.default_rng(self.seed).choice(self.pool, self.n)


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(x.split()[1]) for x in f if x.startswith("VmRSS:")) / 1024


def _peak_mib() -> float:
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure_plan(mode: str, n: int) -> dict:
    """One measurement in this (fresh) process: the driver's peak RSS growth while planning."""
    import numpy as np

    from packtool.align import Alignment
    from packtool.planning.core import PackingConfig, plan
    from packtool.planning.sharded import plan_shards
    from packtool.slabs.shard_sizes import shard_ranges
    align = Alignment(tp=4, cp=2, sp=True, fp8="blockwise", capacity=8192)
    pk = PackingConfig("bfd", overflow="split")
    pool = real_lengths()
    if mode == "sharded":
        from packtool.engines.ray_engine import init_ray
        from packtool.engines.ray_plan import RayRunner
        init_ray(num_cpus=os.cpu_count())
        plan_shards([(0, SyntheticLengths(pool, 0, 10_000))], align, pk, runner=RayRunner())
    plan(pool[:10_000], align, pk)  # numba compiled and loaded before the baseline
    base = _rss_mib()
    t = time.perf_counter()
    held = None
    if mode == "global":
        lengths = np.random.default_rng(0).choice(pool, n)  # the driver holds every length
        p = plan(lengths, align, pk)
        slabs, extra = p.num_slabs, p.num_slabs - p.lower_bound
    else:
        shards = [(a, SyntheticLengths(pool, 1 + a // PLAN_SHARD_ROWS, min(PLAN_SHARD_ROWS, n - a)))
                  for a in range(0, n, PLAN_SHARD_ROWS)]
        sp = plan_shards(shards, align, pk, runner=RayRunner())
        ranges = shard_ranges(sp.slab_len(), 64 << 20)  # what the write step builds on the driver
        held = (sp.routing_args(ranges), [sp.spec(a, e) for a, e in ranges])  # alive at the peak
        slabs, extra = sp.num_slabs, sp.stats.extra_bins
    secs = time.perf_counter() - t
    peak = _peak_mib()
    del held
    return {"mode": mode, "n": n, "seconds": secs, "slabs": slabs, "extra_bins": extra,
            "base_mib": base, "peak_mib": peak, "bytes_per_seq": (peak - base) * 2**20 / n}


def plan_memory(sizes: list[int], write: bool) -> None:
    import subprocess
    rows = []
    for n in sizes:
        for mode in ("global", "sharded"):
            if mode == "global" and n > 30_000_000:
                continue  # ~170 B/seq: more than this shared machine should give one run
            load = os.getloadavg()[0]
            out = subprocess.run([sys.executable, __file__, "--measure", mode, str(n)],
                                 capture_output=True, text=True, check=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            r["load"] = load
            rows.append(r)
            print(r, flush=True)
    lines = [
        f"`python bench/engines.py --plan-memory {','.join(str(n // 10**6) for n in sizes)}` — measured "
        f"{time.strftime('%Y-%m-%d')} on {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, Ray {__import__('ray').__version__}.",
        "",
        "The driver's memory while planning N synthetic lengths (drawn from the real mistral "
        "lengths of ../shared/data; tp=4 cp=2 blockwise FP8, C=8192, bfd `--overflow split`). "
        "global = `plan()` over every length on the driver, as `--engine ray` without "
        f"`--plan-shard-rows` and the local engine plan; sharded = `--plan-shard-rows {PLAN_SHARD_ROWS}`: "
        "shard packs as Ray tasks on a local Ray, placements left in the object store, and the "
        "driver also builds what the write step sends from it (routing arguments per plan "
        "shard, slab specs per output shard). Bytes per sequence = growth of the driver's "
        "peak RSS over its RSS after imports, Ray start and a warm-up plan, divided by N.",
        "",
        "| N | mode | plan s | slabs | extra bins vs lower bound | driver peak RSS growth | bytes per sequence | 1-min load before |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['n'] / 1e6:.0f}M | {r['mode']} | {r['seconds']:.1f} | {r['slabs']:,} | "
                     f"{r['extra_bins']:+,} | {(r['peak_mib'] - r['base_mib']):,.0f} MiB | "
                     f"{r['bytes_per_seq']:.1f} | {r['load']:.1f} |")
    lines += ["", MEMORY_NOTE]
    body = "\n".join(lines)
    print(body)
    if write:
        write_ray_section(memory=body)


MEMORY_NOTE = """Sharded planning keeps ~135 B per slab on the driver (slabs hold ~25 sequences of this
mix), ~33x less than the global plan's per-sequence arrays; the per-sequence state moves to
the object store of the nodes that ran the tasks (placements 36 B per segment, routing rows
40 B per segment during the write; docs/SCALING.md). Extra bins over the lower bound are
about the global plan's, ~8 per million sequences (each row draws its own N sequences).
Global at 100M (~17 GiB) was not run on this shared machine."""


MEMORY_HEADING = "### The driver's memory: global vs sharded planning"


def write_ray_section(main: str | None = None, memory: str | None = None) -> None:
    """BENCHMARKS.md "Ray engine" = the engines run + the planning-memory run; each command
    rewrites its own part and keeps the other's."""
    import re

    from bench.md import PATH, update_section
    text = open(PATH).read()
    m = re.search(r"^## Ray engine\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    old = m.group(1).strip() if m else ""
    old_main, _, old_mem = old.partition(MEMORY_HEADING)
    main = main if main is not None else old_main.strip()
    memory = memory if memory is not None else old_mem.strip()
    update_section("Ray engine", main + ("\n\n" + MEMORY_HEADING + "\n\n" + memory if memory else ""))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--plan-memory", help="comma-separated sizes in millions of sequences")
    ap.add_argument("--measure", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure_plan(args.measure[0], int(args.measure[1]))))
        return
    if args.plan_memory:
        plan_memory([int(float(x) * 10**6) for x in args.plan_memory.split(",")], args.write)
        return

    from packtool.align import Alignment
    from packtool.engines.ray_engine import init_ray, pack_ray
    from packtool.packing import pack
    from packtool.planning.core import PackingConfig, plan
    from packtool.planning.sharded import plan_sharded
    from packtool.tokenize.config import TokenizeConfig

    tmp = tempfile.mkdtemp(prefix="packtool-bench-engines-")
    try:
        inputs = replicate(prepare(tmp), args.copies, tmp)
        cfg = TokenizeConfig(tokenizer=os.path.join(DATA, "tokenizers/mistral-7b-v0.1"),
                             chat_template="mistral", prompt_field="question", response_field="answer")
        align = Alignment(tp=4, cp=2, sp=True, fp8="blockwise", capacity=8192)
        pk = PackingConfig("bfd", overflow="split")
        cores = os.cpu_count()
        rows = []

        load = {"local": os.getloadavg()[0]}
        t = time.perf_counter()
        loc = pack(inputs, align, pk, cfg, output=os.path.join(tmp, "local"),
                   cache_dir=os.path.join(tmp, "c_local"))
        rows.append(("local", time.perf_counter() - t, loc))
        n_tok = int(loc.summary.padding.real_tokens)  # loc.plan may be a ShardedPlan (no segments)
        print(f"local {rows[-1][1]:.1f}s", flush=True)

        t = time.perf_counter()
        init_ray(num_cpus=cores)
        t_init = time.perf_counter() - t
        print(f"ray.init {t_init:.1f}s", flush=True)
        for name in ("ray (cold workers)", "ray (warm workers)"):
            out = os.path.join(tmp, name.split()[1][1:])
            load[name] = os.getloadavg()[0]
            t = time.perf_counter()
            res = pack_ray(inputs, align, pk, cfg, output=out, cache_dir=os.path.join(tmp, "c_" + name[5:9]))
            rows.append((name, time.perf_counter() - t, res))
            print(f"{name} {rows[-1][1]:.1f}s same={same_output(os.path.join(tmp, 'local'), out)}", flush=True)
        identical = all(same_output(os.path.join(tmp, "local"), os.path.join(tmp, n)) for n in ("cold", "warm"))
        name = f"ray, sharded plan ({SHARDED_ROWS:,} rows)"
        load[name] = os.getloadavg()[0]
        t = time.perf_counter()
        res = pack_ray(inputs, align, pk, cfg, output=os.path.join(tmp, "sharded"),
                       cache_dir=os.path.join(tmp, "c_sharded"), plan_shard_rows=SHARDED_ROWS)
        rows.append((name, time.perf_counter() - t, res))
        from packtool.verification.run import verify
        sharded_ok = verify(os.path.join(tmp, "sharded")).ok
        print(f"{name} {rows[-1][1]:.1f}s verifies={sharded_ok} {res.plan.stats}", flush=True)

        from packtool.tokenize.cache import TokenizedCache
        lengths = TokenizedCache(os.path.dirname(loc.cache_path)).lengths()
        g = plan(lengths, align, pk)
        sharded = [(r, plan_sharded(lengths, align, pk, shard_rows=r)) for r in (65536, 16384, 4096)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    recs = 28188 * args.copies
    lines = [
        f"`python bench/engines.py --copies {args.copies} --write` — measured {time.strftime('%Y-%m-%d')} "
        f"on {platform.machine()}, {cores} cores, Python {platform.python_version()}, "
        f"Ray {__import__('ray').__version__}.",
        "",
        f"Every record of ../shared/data x{args.copies} ({recs:,} records, {n_tok:,} tokens after "
        "tokenization): the 12 data files listed "
        f"{args.copies} times (HumanEval and MT-Bench rewritten once into prompt/completion and "
        "text rows), mistral-7b-v0.1 tokenizer + mistral chat template, tp=4 cp=2 sp blockwise "
        "FP8, C=8192, bfd `--overflow split`, 64M-token shards. Each run starts from an empty "
        "tokenized cache: seconds = tokenize + plan + write + manifest. Ray = a local Ray on "
        f"this machine (`ray.init(num_cpus={cores})`); its start-up is not in the rows. The machine "
        "is shared with other sessions: the load average before each run is listed.",
        "",
        "| engine | seconds | tokens/s | tokenize s | write s | shards | same bytes as local | 1-min load before |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, secs, r in rows:
        same = "—" if name == "local" else ("yes" if identical else "NO")
        if "sharded" in name:
            st = r.plan.stats
            same = (f"own bins ({r.plan.num_slabs:,} slabs, {st.extra_bins:+d} vs lower bound); "
                    f"verifies: {'yes' if sharded_ok else 'NO'}")
        lines.append(f"| {name} | {secs:.1f} | {n_tok / secs / 1e6:.2f}M | {r.tokenize_seconds:.1f} | "
                     f"{r.write_seconds:.1f} | {len(r.shards)} | {same} | {load[name]:.1f} |")
    lines += ["", f"`ray.init` (local, {cores} CPUs): {t_init:.1f} s, paid once per driver process.", ""]
    lines += ["Sharded planning on the same lengths (`plan_sharded`: pack each length shard, re-pack "
              "the items of bins under 98% full in one merge):", "",
              "| shard rows | shards | items merged | bins | global plan bins | lower bound | extra vs global | extra vs lower bound |",
              "|---|---|---|---|---|---|---|---|"]
    for r, s in sharded:
        st = s.stats
        lines.append(f"| {r:,} | {st.shards} | {st.merged_items:,} | {s.num_slabs:,} | {g.num_slabs:,} | "
                     f"{st.lower_bound:,} | {s.num_slabs - g.num_slabs:+d} | {st.extra_bins:+d} |")
    body = "\n".join(lines)
    print(body)
    if args.write:
        write_ray_section(main=body + "\n\n" + OVERHEAD_NOTE)


OVERHEAD_NOTE = """Where Ray's overhead goes (one node, 2 cores): `ray.init` (once per driver process,
above); Ray Data's start-up per dataset (worker processes importing packtool, numba and
tokenizers); a counting pass over JSON inputs (packtool's reader, parsing only: rows are
numbered globally, so each file's row count is needed before its cache parts are written);
and a shuffle that moves every token once through the object store (route, then a
sort-based groupby by shard) where the local engine gathers from a memory-mapped flat store.
This run (2026-11-30 ~06:40 UTC, load 3.2-6.8 from other sessions) puts the overhead at
+36-43% end to end on one 2-core node: write 15-16 s under Ray vs 2.7 s local for 97M tokens
(~0.13 s per million tokens of extra data movement; the local writer preads from its flat
store, one thread per core), tokenize 72-75 s vs 61 s (two Ray worker processes vs a render
thread plus `encode_batch` on both cores). Under load the totals do not rank the engines
(an earlier run at load 3-9 had the two Ray runs 30% apart). The sharded plan costs nothing
measurable end to end (planning is under a second either way at this size) and here gives the
global plan's 11,956 slabs; what it changes is where the per-sequence state lives (below).
Ray pays off when there are more cores than one machine has: the tokenize phase, ~80% of the
time here, is split per file / per 64k Parquet rows over the cluster. How this scales past
one machine: docs/SCALING.md."""

if __name__ == "__main__":
    main()
