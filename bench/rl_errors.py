"""Packed vs alone, the RL loss of docs/RL.md in bf16 on CUDA: relative L2 differences of the
per-sequence losses and of the objective's gradient, and of a planted off-by-one (token-aligned
side columns where target-aligned ones belong), for every layout and aggregate of
tests/online/test_online_rl.py. Prints one line each; bench/results/rl/ holds the H200 run.

    PYTHONPATH=$PWD python bench/rl_errors.py [cuda|cpu]
"""
from __future__ import annotations

import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "tests", "online"), os.path.join(HERE, "..", "tests")]
import test_online_rl as t  # noqa: E402


def rel(x, y) -> float:
    return float((x.float() - y.float()).norm() / y.float().norm())


def main(device: str = "cuda") -> None:
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    for name, (align, cp) in t.ALIGNS.items():
        for agg in t.AGGREGATES:
            m = t.TinyLM().to(device=device, dtype=dtype)
            seqs = t._rollouts(7, device)
            n_tok = sum(float(s[1][1:].sum()) for s in seqs)
            per_seq, loss, _ = t._packed(m, seqs, align, cp, agg, **t.CLIP)
            alone = [t._alone(m, s, agg, len(seqs), n_tok, **t.CLIP) for s in seqs]
            ref = torch.stack([a[0] for a in alone]).detach()
            g_packed, g_alone = t._grads(m, loss), t._grads(m, sum(a[1] for a in alone))
            planted, _, _ = t._packed(m, seqs, align, cp, agg, shift=False, **t.CLIP)
            print(f"{name:10s} {agg:20s} per-seq loss rel {rel(per_seq.detach(), ref):.2e}  "
                  f"objective grad rel {rel(g_packed, g_alone):.2e}  "
                  f"planted off-by-one rel {rel(planted.detach(), ref):.2e}")


if __name__ == "__main__":
    main(*sys.argv[1:])
