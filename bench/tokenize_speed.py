"""Tokenization speed: packtool's full input pipeline vs raw `Tokenizer.encode_batch`.

All 28,188 records of ../shared/data (GSM8K train+test, HumanEval, GPTeacher x3, Taskmaster-4
chats, FastChat ShareGPT + MT-Bench, PEPs, Rust book) with the gpt2 and mistral-7b-v0.1
tokenizers. "packtool" is the whole `tokenize_to_cache` call: read files, render templates,
encode, build loss masks, write the zstd Parquet cache and the flat token store (fresh cache
dir, no reuse). "raw" is `Tokenizer.encode_batch(texts, add_special_tokens=False)` on exactly
the texts packtool renders (pre-rendered, in memory, one call: its best case), on the same
cores. "raw-fast" is the stricter baseline a hand-written loop would use: `encode_batch_fast`
for the rows that need no offsets (whole-text loss) and `encode_batch` for the rest, one call
each. Neither raw side frees its Encodings inside the timed region. Every run is a fresh
process after an untimed warm-up (tokenizer loaded, rayon pool started, packtool's compiled
code loaded): in one long-lived process each run costs more CPU than the one before, which
biased whichever side ran later. Runs are interleaved; times are medians of --repeat, ratios
the median of the per-run ratios. Wall and CPU seconds (all threads) are both reported: on a
shared machine CPU time is the steadier measure.

--pack also times the first `pack_cache` of the mistral cache (C=8192, bfd) with the flat
token store as tokenize_to_cache wrote it, with the store removed (rebuilt from Parquet, as
before the store was written while tokenizing) and a re-pack.

    .venv/bin/python bench/tokenize_speed.py [--data ../shared/data] [--repeat 3] [--pack] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tokenizers import Tokenizer  # noqa: E402

from packtool.tokenize import tokenize_to_cache  # noqa: E402
from packtool.tokenize.config import TokenizeConfig  # noqa: E402
from packtool.tokenize.pipeline import _setup  # noqa: E402
from packtool.tokenize.readers import iter_batches  # noqa: E402
from packtool.tokenize.shapes import render_batch  # noqa: E402
from packtool.tokenize.templates import Renderer  # noqa: E402

TOKENIZERS = {"gpt2": "chatml", "mistral-7b-v0.1": "mistral"}


def cpu_s() -> float:
    """CPU seconds of this process, all threads: robust to other load on a shared machine."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def groups(data: str, tmp: str) -> list[tuple[list[str], dict]]:
    """(inputs, config overrides) per call; one cfg cannot name two different field pairs."""
    # MT-Bench holds user turns only (a `turns` list): benchmarked as text, turns joined.
    mt = os.path.join(tmp, "mt_bench_text.jsonl")
    with open(os.path.join(data, "fastchat/mt_bench_question.jsonl")) as f, open(mt, "w") as out:
        for line in f:
            out.write(json.dumps({"text": "\n".join(json.loads(line)["turns"])}) + "\n")
    d = lambda p: os.path.join(data, p)  # noqa: E731
    main = [d("gsm8k/train.jsonl"), d("gsm8k/test.jsonl"), d("gpteacher/codegen-instruct.json"),
            d("gpteacher/roleplay-simple-deduped-roleplay-instruct.json"),
            d("gpteacher/toolformer-dedupe-only-dataset.json"), d("taskmaster4/tm4_coffee_dialogs_chat.jsonl.gz"),
            d("fastchat/dummy_conversation.json"), mt, d("peps/peps_pd_cc0.jsonl.gz"),
            d("rust_book/rust_book_src.jsonl.gz")]
    return [(main, {"prompt_field": "question", "response_field": "answer"}),
            ([d("humaneval/HumanEval.jsonl.gz")], {"prompt_field": "prompt", "response_field": "canonical_solution"})]


def rendered_texts(inputs: list[str], cfg: TokenizeConfig) -> tuple[list[str], list[bool]]:
    """The texts packtool encodes, and per text whether it needs no offsets (no spans)."""
    files, shapes, loaded, template = _setup(inputs, cfg)
    info = loaded.info
    special = {k: v for k, v in (("bos_token", info.bos_token), ("eos_token", info.eos_token)) if v}
    renderer = Renderer(template, special) if template else None
    texts, plain = [], []
    for f, shape in zip(files, shapes):
        for b in iter_batches(f, cfg.batch_size, list(shape.columns)):
            rb = render_batch(b, shape, renderer, cfg.prompt_separator, f.path, 0)
            texts += rb.texts
            plain += [s is None for s in rb.spans]
    return texts, plain


def first_pack(grp, cfgs, tmp: str) -> dict:
    """Seconds of the first pack with the flat store written while tokenizing, of a first pack
    that rebuilds it from Parquet (the old path), and of a re-pack."""
    from packtool.align import Alignment
    from packtool.packing import pack_cache
    from packtool.planning.core import PackingConfig
    from packtool.tokenize.flat_tokens import flat_store_dir
    align, packing = Alignment(capacity=8192), PackingConfig("bfd", overflow="split")
    out, res = os.path.join(tmp, "pack-out"), {"written": [], "rebuilt": [], "repack": []}
    for r in range(3):
        root = os.path.join(tmp, f"pack-cache-{r}")  # a fresh cache each time: its store as written
        cache = tokenize_to_cache(grp[0][0], cfgs[0], root, progress=False)
        if r == 0:
            pack_cache(cache, align, packing, dry_run=True)  # compile the planner first
        for key in res:
            if key == "rebuilt":
                shutil.rmtree(flat_store_dir(cache))
            t0 = time.perf_counter()
            pack_cache(cache, align, packing, out, overwrite=True)
            res[key].append(time.perf_counter() - t0)
        shutil.rmtree(root)
    return {k: statistics.median(v) for k, v in res.items()} | {"tokens": cache.num_tokens}


def run_case(case: str, name: str, data: str, work: str) -> dict:
    """One timed run in this (fresh) process: the heap of earlier runs would slow later ones
    (CPU per run grows ~5% a run in one process), so every run gets its own process. Warm-up
    first, untimed: the tokenizer loaded, the rayon pool started, packtool's numba code loaded."""
    grp = groups(data, work)
    tok_path = os.path.join(data, "tokenizers", name, "tokenizer.json")
    if case == "ours":
        cfgs = [TokenizeConfig(tokenizer=tok_path, chat_template=TOKENIZERS[name], **over) for _, over in grp]
        root = tempfile.mkdtemp(dir=work)
        tokenize_to_cache(grp[1][0], cfgs[1], os.path.join(root, "warm"), progress=False)
        t0, c0 = time.perf_counter(), cpu_s()
        caches = [tokenize_to_cache(inputs, cfg, os.path.join(root, "run"), progress=False)
                  for (inputs, _), cfg in zip(grp, cfgs)]
        out = {"wall": time.perf_counter() - t0, "cpu": cpu_s() - c0,
               "rows": sum(c.num_rows for c in caches), "tokens": sum(c.num_tokens for c in caches)}
        shutil.rmtree(root)
        return out
    with open(os.path.join(work, f"texts-{name}.pkl"), "rb") as f:
        texts, plain = pickle.load(f)
    tok = Tokenizer.from_file(tok_path)
    tok.encode_batch(texts[:64], add_special_tokens=False)
    t0, c0 = time.perf_counter(), cpu_s()
    if case == "raw":
        enc = tok.encode_batch(texts, add_special_tokens=False)
    else:  # raw-fast: offsets only where a loss span needs them
        enc = tok.encode_batch_fast([t for t, p in zip(texts, plain) if p], add_special_tokens=False) + \
            tok.encode_batch([t for t, p in zip(texts, plain) if not p], add_special_tokens=False)
    out = {"wall": time.perf_counter() - t0, "cpu": cpu_s() - c0, "rows": len(enc),
           "tokens": sum(len(e) for e in enc)}
    return out


def child(case: str, name: str, data: str, work: str) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--case", case, "--tokenizer", name,
           "--data", data, "--work", work]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode:
        raise RuntimeError(f"{case} {name} failed:\n{res.stderr}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--pack", action="store_true", help="also time the first pack (see docstring)")
    ap.add_argument("--case", choices=["raw", "fast", "ours"], help=argparse.SUPPRESS)
    ap.add_argument("--tokenizer", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    args = ap.parse_args()
    data = os.path.abspath(args.data)
    if args.case:
        print(json.dumps(run_case(args.case, args.tokenizer, data, args.work)))
        return
    tmp = tempfile.mkdtemp(prefix="tokbench-")
    results = {"machine": f"{platform.node()} {platform.processor() or platform.machine()}, "
                          f"{os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "loadavg_start": os.getloadavg()[0], "tokenizers": {}}
    try:
        grp = groups(data, tmp)
        for name, template in TOKENIZERS.items():
            tok_path = os.path.join(data, "tokenizers", name, "tokenizer.json")
            cfgs = [TokenizeConfig(tokenizer=tok_path, chat_template=template, **over) for _, over in grp]
            texts, plain = [], []
            for (inputs, _), cfg in zip(grp, cfgs):
                t, p = rendered_texts(inputs, cfg)
                texts += t
                plain += p
            with open(os.path.join(tmp, f"texts-{name}.pkl"), "wb") as f:
                pickle.dump((texts, plain), f)
            runs: dict[str, list[dict]] = {"raw": [], "fast": [], "ours": []}
            for r in range(args.repeat):
                for case in runs:  # interleaved, one fresh process each
                    runs[case].append(child(case, name, data, tmp))
                print(f"{name} run {r}: " + ", ".join(
                    f"{c} {v[-1]['wall']:.2f}s ({v[-1]['cpu']:.2f} cpu-s)" for c, v in runs.items())
                    + f", load {os.getloadavg()[0]:.1f}", flush=True)
            med = {f"{c}_{k}": statistics.median(x[k] for x in v) for c, v in runs.items() for k in ("wall", "cpu")}

            def ratio(a: str, b: str, k: str) -> float:  # per interleaved run (same load), then the median
                return statistics.median(x[k] / y[k] for x, y in zip(runs[a], runs[b]))
            ours = runs["ours"][-1]
            results["tokenizers"][name] = {
                "template": template, "texts": len(texts), "rows": ours["rows"], "tokens": ours["tokens"],
                "raw_tokens": runs["raw"][-1]["tokens"], "raw_s": med["raw_wall"], "raw_fast_s": med["fast_wall"],
                "packtool_s": med["ours_wall"],
                "raw_tok_per_s": runs["raw"][-1]["tokens"] / med["raw_wall"],
                "packtool_tok_per_s": ours["tokens"] / med["ours_wall"],
                "ratio": ratio("ours", "raw", "wall"), "ratio_vs_fast": ratio("ours", "fast", "wall"),
                "raw_cpu_s": med["raw_cpu"], "raw_fast_cpu_s": med["fast_cpu"], "packtool_cpu_s": med["ours_cpu"],
                "cpu_ratio": ratio("ours", "raw", "cpu"), "cpu_ratio_vs_fast": ratio("ours", "fast", "cpu"),
                "runs": runs, "loadavg_1min_end": os.getloadavg()[0]}
            print(json.dumps({k: v for k, v in results["tokenizers"][name].items() if k != "runs"}), flush=True)
            if args.pack and name == "mistral-7b-v0.1":
                results["first_pack"] = first_pack(grp, cfgs, tmp)
                print(json.dumps(results["first_pack"]), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nmachine: {results['machine']}; {results['date']}; load {results['loadavg_start']:.1f} at start")
    print("| tokenizer | template | rows | tokens | raw encode_batch | raw-fast | packtool tokenize_to_cache | "
          "wall ratio (vs raw-fast) | CPU s raw / raw-fast / packtool | CPU ratio (vs raw-fast) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, r in results["tokenizers"].items():
        print(f"| {name} | {r['template']} | {r['rows']:,} | {r['tokens']:,} | {r['raw_s']:.1f} s "
              f"({r['raw_tok_per_s'] / 1e3:,.0f}k tok/s) | {r['raw_fast_s']:.1f} s | {r['packtool_s']:.1f} s "
              f"({r['packtool_tok_per_s'] / 1e3:,.0f}k tok/s) | **{r['ratio']:.2f}x** ({r['ratio_vs_fast']:.2f}x) | "
              f"{r['raw_cpu_s']:.1f} / {r['raw_fast_cpu_s']:.1f} / {r['packtool_cpu_s']:.1f} | "
              f"{r['cpu_ratio']:.2f}x ({r['cpu_ratio_vs_fast']:.2f}x) |")
    if "first_pack" in results:
        fp = results["first_pack"]
        print(f"\nfirst pack ({fp['tokens']:,} tokens): flat store written while tokenizing {fp['written']:.2f} s, "
              f"rebuilt from Parquet {fp['rebuilt']:.2f} s, re-pack {fp['repack']:.2f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
