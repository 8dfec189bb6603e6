"""Where a training step's time goes, and which model/batch shapes run fastest (one GPU).

Runs `packtool train`'s loop on the same slabs for each variant (a few steps each) and
prints real tokens/s and MFU; with --profile, a torch.profiler table of the first variant's
CUDA kernels (by total time) and the GPU-busy fraction of its wall time.

    python bench/train_variants.py --data DIR --out OUT --steps 20 --profile \
        --variant base:layers=24,hidden=1536,heads=12,ffn=4096,mbt=16384,ga=2,head=fused \
        --variant ga8:layers=24,hidden=1536,heads=12,ffn=4096,mbt=16384,ga=8,head=fused
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

from packtool.megatron.dataset import PackedSlabDataset  # noqa: E402
from packtool.megatron.loop import TrainConfig, train  # noqa: E402
from packtool.megatron.model import GPTShape, padded_vocab  # noqa: E402

DEFAULTS = dict(layers=24, hidden=1536, heads=12, ffn=4096, mbt=16384, ga=2, head="fused",
                kv=0)


def parse_variant(text: str) -> tuple[str, dict]:
    name, _, body = text.partition(":")
    v = dict(DEFAULTS)
    for kv in filter(None, body.split(",")):
        k, _, val = kv.partition("=")
        if k not in v:
            raise SystemExit(f"--variant {text}: unknown key {k!r} (known: {sorted(v)})")
        v[k] = type(DEFAULTS[k])(val)
    return name, v


def config(data: str, v: dict, steps: int, vocab: int) -> TrainConfig:
    shape = GPTShape(layers=v["layers"], hidden=v["hidden"], heads=v["heads"], ffn=v["ffn"],
                     vocab=vocab, kv_heads=v["kv"] or None, max_seq=max(8192, v["mbt"]))
    return TrainConfig(data_dir=data, shape=shape, steps=steps, lr=3e-4, warmup=5,
                       grad_accum=v["ga"], micro_batch_tokens=v["mbt"], device="cuda",
                       lm_head=v["head"], log_every=0, quiet=True, seed=0)


def summary(res, skip: int) -> dict:
    recs = res.records[skip:]
    secs = sum(r.seconds for r in recs)
    return {"params_m": res.params / 1e6, "steps_timed": len(recs),
            "real_tok_s": sum(r.real_tokens for r in recs) / secs,
            "mfu_989": float(np.average([r.mfu for r in recs], weights=[r.seconds for r in recs])),
            "s_per_step": secs / len(recs),
            "loss_last": res.records[-1].loss,
            "peak_gib": torch.cuda.max_memory_allocated() / 2 ** 30}


def profile(cfg: TrainConfig, out: str) -> dict:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as prof
    train(cfg.__class__(**{**cfg.__dict__, "steps": 3}))  # warm: compile caches, allocator
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with prof(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        res = train(cfg.__class__(**{**cfg.__dict__, "steps": 4}))
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    ev = p.key_averages()
    table = ev.table(sort_by="cuda_time_total", row_limit=45, max_name_column_width=70)
    kern = sum(e.self_device_time_total for e in ev if e.device_type.name == "CUDA") / 1e6
    steps = sum(r.seconds for r in res.records)
    with open(os.path.join(out, "profile.txt"), "w") as f:
        f.write(table)
    print(table, flush=True)
    return {"profiled_wall_s": wall, "step_s_sum": steps, "gpu_kernel_s": kern}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--skip", type=int, default=5)
    ap.add_argument("--variant", action="append", required=True)
    ap.add_argument("--profile", action="store_true", help="profile the first variant")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    ds = PackedSlabDataset(a.data)
    vocab = padded_vocab(ds.manifest.vocab_size)
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    for i, text in enumerate(a.variant):
        name, v = parse_variant(text)
        cfg = config(a.data, v, a.steps, vocab)
        torch.cuda.reset_peak_memory_stats()
        try:
            if i == 0 and a.profile:
                results["profile"] = profile(cfg, a.out)
            res = train(cfg)
            results[name] = {**v, **summary(res, a.skip)}
        except Exception as e:  # one failing shape must not lose the others' figures
            results[name] = {**v, "error": f"{type(e).__name__}: {e}"[:400]}
        print(name, json.dumps(results[name]), flush=True)
        torch.cuda.empty_cache()
    with open(os.path.join(a.out, "variants.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
