"""Packed (THD slabs) vs length-grouped padded training of one megatron-core GPTModel.

One process, one GPU (or torchrun for the multi-GPU checks with --only-packed):
  1. bf16 matmul rate measured here (8192^3), the same-run ceiling for MFU;
  2. packtool's varlen attention checked against the per-chunk SDPA reference (cp=1, cp=2);
  3. PACKED: `packtool train`'s loop on the slabs (one slab = one micro-batch of <= budget);
  4. PADDED: the same model (same seed) on the same sequences, HF group_by_length style:
     megabatches of shuffled sequences sorted by length, cut into micro-batches of B rows
     with B * longest <= the same token budget, every row padded to the longest. They run
     through the same loop and kernels (each row a THD segment of the padded length, which
     is exactly the compute of a right-padded [B, L] causal batch).
Real tokens/s count non-pad tokens only; MFU uses model FLOPs on real tokens with
attention on real segment lengths (packtool.megatron.flops), against 989 TFLOP/s and
against the matmul rate measured in step 1.

    python bench/train_h200.py --data DIR --out OUT [--layers 24 --hidden 1536 ...]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from packtool.megatron.dataset import PackedSlabDataset, Step  # noqa: E402
from packtool.megatron.loop import TrainConfig, train  # noqa: E402
from packtool.megatron.model import GPTShape, padded_vocab  # noqa: E402
from packtool.megatron.parallel import init_parallel  # noqa: E402
from packtool.megatron.thd import make_thd_batch  # noqa: E402


def matmul_tflops(n: int = 8192, reps: int = 10) -> float:
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(reps):
        a @ b
    e1.record()
    torch.cuda.synchronize()
    return 2 * n ** 3 * reps / (e0.elapsed_time(e1) / 1e3) / 1e12


class _LocalCat:
    """Stand-in CP group: 'gathers' by concatenating given per-rank tensors."""

    def __init__(self, others):
        self.others = others

    def size(self):
        return 2

    def rank(self):
        return 0

    def all_gather(self, x):
        return torch.cat([x] + self.others.pop(0), 0)


def check_attention() -> dict:
    """varlen_attn (GPU path) vs the per-chunk SDPA reference on the same inputs."""
    from packtool.megatron.attention import PackedCoreAttention, _sdpa_chunks
    from packtool.megatron.thd import build_thd_params
    torch.manual_seed(0)
    out = {}
    seg_len = np.array([37, 200, 5, 91])
    for cp in (1, 2):
        seg_pad = -(-seg_len // (2 * cp)) * (2 * cp) if cp > 1 else seg_len
        t = int(seg_pad.sum()) // cp
        q, k, v = (torch.randn(t, 4, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        k2, v2 = torch.randn_like(k), torch.randn_like(v)
        grp = _LocalCat([[k2], [v2]]) if cp > 1 else None
        p = build_thd_params(seg_len, seg_pad, cp, 0, "cuda", grp)
        attn = PackedCoreAttention.__new__(PackedCoreAttention)
        torch.nn.Module.__init__(attn)
        attn.softmax_scale = 128 ** -0.5
        got = attn.forward(q, k, v, None, packed_seq_params=p).float()
        kk, vv = (torch.cat([k, k2]), torch.cat([v, v2])) if cp > 1 else (k, v)
        if cp > 1:
            kk, vv = kk.index_select(0, p.kv_index), vv.index_select(0, p.kv_index)
        ref = _sdpa_chunks(q.float(), kk.float(), vv.float(), p.attn_cu_q_host,
                           p.attn_cu_k_host, 128 ** -0.5).reshape(t, -1)
        out[f"cp{cp}_max_abs_err"] = float((got - ref).abs().max())
    return out


def length_grouped_batches(lengths: np.ndarray, budget: int, seed: int, style: str) -> list:
    """Row indices of each padded micro-batch.

    style='hf': transformers' `group_by_length` (LengthGroupedSampler): a fixed batch size
      B, seeded permutation, megabatches of 50 x B sorted by length (longest first), cut
      into batches of B. Under a token budget a fixed B must fit the longest sequence, so
      B = budget // longest: the memory the packed run gets, with HF's batching.
    style='bucketed': the stronger baseline, dynamic B (a token-budget bucketing HF does not
      have): megabatches of 256 sorted by length, cut greedily so B x longest <= budget."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(lengths.size)
    if style == "hf":
        b = max(1, budget // int(lengths.max()))
        mega = 50 * b
        flat = np.concatenate([sorted(order[m:m + mega], key=lambda i: -lengths[i])
                               for m in range(0, order.size, mega)])
        return [flat[i:i + b] for i in range(0, flat.size, b)]
    if style != "bucketed":
        raise ValueError(f"padded style {style!r}")
    batches = []
    for m0 in range(0, order.size, 256):
        cur: list = []
        for i in sorted(order[m0:m0 + 256], key=lambda i: -lengths[i]):
            if cur and (len(cur) + 1) * lengths[cur[0]] > budget:
                batches.append(cur)
                cur = []
            cur.append(i)
        if cur:
            batches.append(cur)
    return batches


def padded_source(budget: int, real_per_step: float, seed: int, device: str = "cuda",
                  style: str = "hf"):
    """Steps of length-grouped padded micro-batches built from the slabs' own sequences;
    each step takes as many micro-batches as hold about `real_per_step` real tokens (the
    packed run's), so the optimizer's share of a step is the same in both runs."""

    def source(ds: PackedSlabDataset, start: int):
        seqs = []
        for i in range(len(ds.index)):
            r = ds.reader.row(i)
            starts = np.concatenate(([0], np.cumsum(r.seg_padded)[:-1]))
            for s0, n in zip(starts, r.seq_lens):
                if n > 0:
                    seqs.append((np.array(r.input_ids[s0:s0 + n]),
                                 np.array(r.loss_mask[s0:s0 + n])))
        lengths = np.array([len(x[0]) for x in seqs])
        batches = length_grouped_batches(lengths, budget, seed, style)
        per_batch = lengths.sum() / len(batches)
        accum = max(1, int(round(real_per_step / per_batch)))
        print(json.dumps({"padded_style": style, "micro_batches": len(batches),
                          "rows_per_batch": float(np.mean([len(b) for b in batches])),
                          "real_fraction": float(lengths.sum() / sum(
                              len(b) * lengths[b].max() for b in batches)),
                          "micro_batches_per_step": accum}), flush=True)
        step = 0
        while True:
            for b0 in range(0, len(batches) - accum + 1, accum):
                mbs = []
                for b in batches[b0:b0 + accum]:
                    L = int(lengths[b].max())
                    ids = np.zeros(L * len(b), np.int32)
                    mask = np.zeros(L * len(b), np.uint8)
                    for j, i in enumerate(b):
                        n = lengths[i]
                        ids[j * L:j * L + n], mask[j * L:j * L + n] = seqs[i]
                    mbs.append(make_thd_batch(ids, mask, lengths[b], np.full(len(b), L),
                                              device=device))
                if step >= start:
                    yield Step(step=step, epoch=0, micro_batches=mbs, n_empty=0,
                               loss_tokens=sum(m.num_loss_tokens for m in mbs),
                               real_tokens=sum(m.num_tokens for m in mbs))
                step += 1

    return source


def summarize(res, skip: int) -> dict:
    recs = res.records[skip:] or res.records
    secs = sum(r.seconds for r in recs)
    return {"steps": len(res.records), "params": res.params,
            "real_tokens_per_s": sum(r.real_tokens for r in recs) / secs,
            "mfu_989": float(np.average([r.mfu for r in recs], weights=[r.seconds for r in recs])),
            "loss_first10": float(np.mean([r.loss for r in res.records[:10]])),
            "loss_last10": float(np.mean([r.loss for r in res.records[-10:]])),
            "seconds_per_step": secs / len(recs),
            "physical_tokens_per_step": None,
            "loss_curve_every5": [round(r.loss, 4) for r in res.records[::5]]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--hidden", type=int, default=1536)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--ffn", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--padded-steps", type=int, default=100)
    ap.add_argument("--budget", type=int, default=8192)
    ap.add_argument("--grad-accum", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--lm-head", default="torch")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--cp", type=int, default=1)
    ap.add_argument("--only-packed", action="store_true")
    ap.add_argument("--micro-batch-tokens", type=int, default=None,
                    help="packed: merge slabs up to N tokens (default: one slab each)")
    ap.add_argument("--padded", default="hf,bucketed",
                    help="padded baselines to run, comma-separated: hf, bucketed")
    ap.add_argument("--tag", default=None)
    ap.add_argument("--device", default="cuda", help="cpu: a smoke run of this script")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    info = init_parallel(a.tp, a.cp, a.device)
    gpu = a.device == "cuda"
    summary = {"device": torch.cuda.get_device_name() if gpu else "cpu", "torch": torch.__version__,
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "world": info.world, "tp": a.tp, "cp": a.cp, "dp": info.dp}
    if info.is_main and gpu:
        summary["matmul_bf16_tflops"] = matmul_tflops()
        summary["attention_check"] = check_attention()
        print(json.dumps(summary), flush=True)
    ds = PackedSlabDataset(a.data, cp_size=a.cp)
    vocab = padded_vocab(ds.manifest.vocab_size, a.tp)
    shape = GPTShape(layers=a.layers, hidden=a.hidden, heads=a.heads, ffn=a.ffn, vocab=vocab,
                     max_seq=max(8192, a.budget))
    base = dict(data_dir=a.data, shape=shape, tp=a.tp, cp=a.cp, lr=a.lr, warmup=20,
                grad_accum=a.grad_accum, device=a.device, lm_head=a.lm_head, log_every=25,
                seed=0)
    tag = a.tag or f"tp{a.tp}cp{a.cp}dp{info.dp}"
    t0 = time.time()
    res = train(TrainConfig(**base, steps=a.steps, micro_batch_tokens=a.micro_batch_tokens,
                            json_log=f"/tmp/packed_{tag}.jsonl"))
    summary["packed"] = summarize(res, skip=10)
    summary["packed"]["wall_s"] = time.time() - t0
    summary["packed"]["physical_tokens_per_step"] = float(np.mean(
        [r.micro_batches for r in res.records])) * (a.micro_batch_tokens or ds.align.usable)
    real_per_step = float(np.mean([r.real_tokens for r in res.records]))
    for style in ([] if a.only_packed else a.padded.split(",")):
        if gpu:
            torch.cuda.empty_cache()
        t0 = time.time()
        res = train(TrainConfig(**base, steps=a.padded_steps, json_log=f"/tmp/padded_{style}_{tag}.jsonl"),
                    source=padded_source(a.budget, real_per_step, seed=0, device=a.device,
                                         style=style))
        key = f"padded_{style}"
        summary[key] = summarize(res, skip=10)
        summary[key]["wall_s"] = time.time() - t0
        summary[f"speedup_vs_{style}"] = (summary["packed"]["real_tokens_per_s"]
                                          / summary[key]["real_tokens_per_s"])
    if info.is_main:
        mm = summary.get("matmul_bf16_tflops")
        for k in [k for k in summary if k == "packed" or k.startswith("padded_")]:
            if k in summary and mm:
                summary[k]["mfu_vs_measured_matmul"] = summary[k]["mfu_989"] * 989 / mm
        if gpu:
            summary["peak_mem_gib"] = torch.cuda.max_memory_allocated() / 2 ** 30
        with open(os.path.join(a.out, f"summary_{tag}.json"), "w") as f:
            json.dump(summary, f, indent=1)
        print(json.dumps(summary, indent=1), flush=True)


if __name__ == "__main__":
    main()
