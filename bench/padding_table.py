"""Padding tokens under each layout convention on the real token lengths.

Real lengths: all 28,188 records of ../shared/data (token_lengths_by_source.json, mistral
tokenizer), tp=4, cp=2, blockwise FP8, C=8192, bfd, --overflow split. Writes its section of
BENCHMARKS.md.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.md import update_section  # noqa: E402
from packtool.align import CONVENTIONS, Alignment  # noqa: E402
from packtool.planning.core import PackingConfig, plan  # noqa: E402
from packtool.planning.summary import padding_stats  # noqa: E402

SHARED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "data")


def real_lengths(tokenizer: str = "mistral-7b-v0.1") -> np.ndarray:
    d = json.load(open(os.path.join(SHARED, "token_lengths_by_source.json")))
    return np.concatenate([np.asarray(v[tokenizer]["lengths"], np.int64) for v in d["sources"].values()])


def main() -> None:
    lengths = real_lengths()
    rows = []
    for conv in CONVENTIONS:
        a = Alignment(tp=4, cp=2, fp8="blockwise", capacity=8192, convention=conv)
        p = plan(lengths, a, PackingConfig(algorithm="bfd", overflow="split"))
        s = padding_stats(p.layout, a, p.singleton)
        pad = s.layout_pad + s.tail_pad
        rows.append(f"| {conv} | {a.s} | {a.t} | {p.num_slabs:,} | {s.layout_pad:,} | {s.tail_pad:,} "
                    f"| {pad:,} | {100 * pad / s.real_tokens:.2f}% | {s.slack:,} |")
    body = "\n".join([
        f"{lengths.size:,} real sequences ({int(lengths.sum()):,} tokens, mistral-7b-v0.1 lengths of "
        "every record in ../shared/data), tp=4, cp=2, sp on, blockwise FP8, C=8192, bfd, "
        "`--overflow split`. Padding = per-sequence layout gaps + per-slab tail pads; slack is "
        "unused capacity that is not written. `python bench/padding_table.py`",
        f"Measured {datetime.date.today()} on {platform.machine()} ({os.cpu_count()} cores).", "",
        "| convention | s | t | slabs | layout gaps | tail pads | padding | padding / real | slack |",
        "|---|---|---|---|---|---|---|---|---|", *rows])
    update_section("Padding by convention", body)
    print(body)


if __name__ == "__main__":
    main()
