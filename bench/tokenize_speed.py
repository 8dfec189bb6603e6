"""Tokenization speed: packtool's full input pipeline vs raw `Tokenizer.encode_batch`.

All 28,188 records of ../shared/data (GSM8K train+test, HumanEval, GPTeacher x3, Taskmaster-4
chats, FastChat ShareGPT + MT-Bench, PEPs, Rust book) with the gpt2 and mistral-7b-v0.1
tokenizers. "packtool" is the whole `tokenize_to_cache` call: read files, render templates,
encode, build loss masks, write the zstd Parquet cache (fresh cache dir, no reuse). "raw" is
`Tokenizer.encode_batch(texts, add_special_tokens=False)` on exactly the texts packtool
renders (pre-rendered, in memory, one call: its best case), on the same cores. Runs are
interleaved; times are medians of --repeat, ratios the median of the per-pair ratios. Wall
and CPU seconds (all threads) are both reported: on a shared machine CPU time is the
steadier measure.

    .venv/bin/python bench/tokenize_speed.py [--data ../shared/data] [--repeat 3] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tokenizers import Tokenizer  # noqa: E402

from packtool.config import TokenizeConfig  # noqa: E402
from packtool.io import tokenize_to_cache  # noqa: E402
from packtool.io.pipeline import _setup  # noqa: E402
from packtool.io.readers import iter_batches  # noqa: E402
from packtool.io.shapes import render_batch  # noqa: E402
from packtool.io.templates import Renderer  # noqa: E402

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


def rendered_texts(inputs: list[str], cfg: TokenizeConfig) -> list[str]:
    files, shapes, loaded, template = _setup(inputs, cfg)
    info = loaded.info
    special = {k: v for k, v in (("bos_token", info.bos_token), ("eos_token", info.eos_token)) if v}
    renderer = Renderer(template, special) if template else None
    texts = []
    for f, shape in zip(files, shapes):
        for b in iter_batches(f, cfg.batch_size, list(shape.columns)):
            texts += render_batch(b, shape, renderer, cfg.prompt_separator, f.path, 0).texts
    return texts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="tokbench-")
    results = {"machine": f"{platform.node()} {platform.processor() or platform.machine()}, "
                          f"{os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "tokenizers": {}}
    try:
        grp = groups(os.path.abspath(args.data), tmp)
        for name, template in TOKENIZERS.items():
            tok_path = os.path.join(args.data, "tokenizers", name, "tokenizer.json")
            cfgs = [TokenizeConfig(tokenizer=tok_path, chat_template=template, **over) for _, over in grp]
            texts = [t for (inputs, _), cfg in zip(grp, cfgs) for t in rendered_texts(inputs, cfg)]
            tok = Tokenizer.from_file(tok_path)
            raw_t, ours_t, raw_c, ours_c, rows, tokens, raw_tokens = [], [], [], [], 0, 0, 0
            for r in range(args.repeat):
                t0, c0 = time.perf_counter(), cpu_s()
                enc = tok.encode_batch(texts, add_special_tokens=False)
                raw_t.append(time.perf_counter() - t0)
                raw_c.append(cpu_s() - c0)
                raw_tokens = sum(len(e) for e in enc)
                del enc
                cache_root = os.path.join(tmp, f"cache-{name}-{r}")
                t0, c0 = time.perf_counter(), cpu_s()
                caches = [tokenize_to_cache(inputs, cfg, cache_root, progress=False)
                          for (inputs, _), cfg in zip(grp, cfgs)]
                ours_t.append(time.perf_counter() - t0)
                ours_c.append(cpu_s() - c0)
                rows = sum(c.num_rows for c in caches)
                tokens = sum(c.num_tokens for c in caches)
                shutil.rmtree(cache_root)
                print(f"{name} run {r}: raw {raw_t[-1]:.2f}s ({raw_c[-1]:.2f} cpu-s), "
                      f"packtool {ours_t[-1]:.2f}s ({ours_c[-1]:.2f} cpu-s), load {os.getloadavg()[0]:.1f}",
                      flush=True)
            raw, ours = statistics.median(raw_t), statistics.median(ours_t)
            rawc, oursc = statistics.median(raw_c), statistics.median(ours_c)
            results["tokenizers"][name] = {
                "template": template, "texts": len(texts), "rows": rows, "tokens": tokens,
                "raw_tokens": raw_tokens, "raw_s": raw, "packtool_s": ours,
                "raw_tok_per_s": raw_tokens / raw, "packtool_tok_per_s": tokens / ours,
                # ratios of interleaved pairs (same load), then the median
                "ratio": statistics.median(o / r for o, r in zip(ours_t, raw_t)),
                "raw_cpu_s": rawc, "packtool_cpu_s": oursc,
                "cpu_ratio": statistics.median(o / r for o, r in zip(ours_c, raw_c)),
                "raw_runs": raw_t, "packtool_runs": ours_t, "raw_cpu_runs": raw_c, "packtool_cpu_runs": ours_c,
                "loadavg_1min_end": os.getloadavg()[0]}
            print(json.dumps(results["tokenizers"][name]), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nmachine: {results['machine']}; {results['date']}")
    print("| tokenizer | template | rows | tokens | raw encode_batch | packtool tokenize_to_cache | "
          "wall ratio | CPU-s raw / packtool | CPU ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, r in results["tokenizers"].items():
        print(f"| {name} | {r['template']} | {r['rows']:,} | {r['tokens']:,} | {r['raw_s']:.1f} s "
              f"({r['raw_tok_per_s'] / 1e3:.0f}k tok/s) | {r['packtool_s']:.1f} s "
              f"({r['packtool_tok_per_s'] / 1e3:.0f}k tok/s) | {r['ratio']:.2f}x | "
              f"{r['raw_cpu_s']:.1f} / {r['packtool_cpu_s']:.1f} | {r['cpu_ratio']:.2f}x |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
