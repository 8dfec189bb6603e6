"""bf16 vs FP8 tensorwise vs FP8 blockwise training of one megatron-core GPTModel on one GPU.

`packtool train`'s own loop (packtool.megatron.loop.train) with TrainConfig.fp8 set, on the
same slabs, same seed, same data order:
  --mode curves  each recipe for --steps steps (default 300): real tok/s, MFU, the loss
                 curve, the mean loss of the last 50 steps and its gap to bf16.
  --mode speed   short runs (--steps, first --skip untimed) alternated over recipes for
                 --rounds rounds in one process: tok/s per run, median and spread.
  --profile      after either mode: torch.profiler over --profile-steps steps per recipe,
                 device time split into FP8 GEMMs, FP8 quantization (packtool/kernels/fp8.py's
                 record_function ranges), bf16 GEMMs and the rest.
  --seeds 0,1    curves: every recipe once per seed (the seed sets the init and the data
                 order); loss gaps are taken against bf16 of the same seed.
A recipe may name its quantizers: `blockwise@compiled` runs the torch.compile'd reference
quantizers, `blockwise` (= `blockwise@triton`) packtool/kernels/fp8_quant.py's.
MFU counts model FLOPs on real tokens against 989 TFLOP/s (dense bf16) for every recipe,
so FP8 gains show as higher MFU on the same scale; FP8 runs also report it against the dense
FP8 peak (1979 TFLOP/s, H100/H200 SXM datasheet), the ceiling their linears could reach.

    python bench/train_fp8.py --data DIR --out OUT [--mode curves|speed] [--layers ...]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from packtool.megatron.dataset import PackedSlabDataset
from packtool.megatron.loop import TrainConfig, train
from packtool.megatron.model import GPTShape, padded_vocab
from packtool.megatron.parallel import init_parallel


FP8_PEAK_TFLOPS = 1979  # dense FP8, H100/H200 SXM datasheet (989 is dense bf16)


def _split(label):
    recipe, _, quant = label.partition("@")
    return recipe, quant or "triton"


def run(a, shape, label, steps, skip, seed=0):
    from packtool.kernels import fp8 as kfp8
    recipe, kfp8.QUANT = _split(label)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    cfg = TrainConfig(data_dir=a.data, shape=shape, lr=a.lr, warmup=20, steps=steps,
                      grad_accum=a.grad_accum, micro_batch_tokens=a.micro_batch_tokens,
                      device="cuda", lm_head=a.lm_head, log_every=a.log_every, seed=seed,
                      fp8=recipe)
    t0 = time.time()
    res = train(cfg)
    recs = res.records[skip:] or res.records
    secs = sum(r.seconds for r in recs)
    losses = [r.loss for r in res.records]
    mfu = float(np.average([r.mfu for r in recs], weights=[r.seconds for r in recs]))
    return {"recipe": label, "seed": seed, "steps": len(res.records), "wall_s": time.time() - t0,
            "real_tokens_per_s": sum(r.real_tokens for r in recs) / secs,
            "mfu_989": mfu,
            "mfu_fp8_peak": mfu * 989 / FP8_PEAK_TFLOPS if recipe != "none" else None,
            "seconds_per_step": secs / len(recs),
            "loss_last50": float(np.mean(losses[-50:])),
            "loss_means_of_50": [round(float(np.mean(losses[i:i + 50])), 4)
                                 for i in range(0, len(losses), 50)],
            "loss_curve": [round(x, 4) for x in losses],
            "peak_mem_gib": torch.cuda.max_memory_allocated() / 2 ** 30}


def profile(a, shape, recipe, steps) -> dict:
    """Device time per step by category over `steps` steps (after a warm-up run)."""
    from torch.profiler import ProfilerActivity
    with torch.profiler.profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as p:
        run(a, shape, recipe, steps, 0)
    kern = [e for e in p.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
    total = sum(e.self_device_time_total for e in kern)
    ranges = {e.key: e.device_time_total for e in p.key_averages() if e.key in
              ("fp8_quant", "fp8_gemm")}
    gemm_words = ("gemm", "nvjet", "cutlass", "sm90_xmma", "xmma_", "Kernel2")
    all_gemm = sum(e.self_device_time_total for e in kern
                   if any(w in e.key for w in gemm_words))
    top = sorted(kern, key=lambda e: -e.self_device_time_total)[:25]
    ms = 1e-3 / steps  # profiler times are microseconds
    return {"recipe": recipe, "steps": steps, "device_ms_per_step": total * ms,
            "fp8_gemm_ms_per_step": ranges.get("fp8_gemm", 0) * ms,
            "fp8_quant_ms_per_step": ranges.get("fp8_quant", 0) * ms,
            "all_gemm_kernels_ms_per_step": all_gemm * ms,
            "top_kernels": [(e.key[:90], round(e.self_device_time_total * ms, 3), e.count // steps)
                            for e in top]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--mode", default="curves", choices=("curves", "speed"))
    ap.add_argument("--recipes", default="none,tensorwise,blockwise")
    ap.add_argument("--layers", type=int, default=14)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--ffn", type=int, default=5632)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--skip", type=int, default=10, help="untimed first steps (compiles)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--grad-accum", type=int, default=4)
    ap.add_argument("--micro-batch-tokens", type=int, default=16384)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--lm-head", default="fused")
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--profile-steps", type=int, default=3)
    ap.add_argument("--tag", default="fp8")
    ap.add_argument("--seeds", default="0", help="curves: comma-separated seeds")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    init_parallel(1, 1, "cuda")
    ds = PackedSlabDataset(a.data)
    shape = GPTShape(layers=a.layers, hidden=a.hidden, heads=a.heads, ffn=a.ffn,
                     vocab=padded_vocab(ds.manifest.vocab_size, 1), max_seq=8192)
    recipes = a.recipes.split(",")
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "load": os.getloadavg(), "shape": shape.__dict__, "params_m": shape.params() / 1e6,
           "args": vars(a), "runs": []}
    seeds = [int(x) for x in a.seeds.split(",")]
    order = ([(rc, sd) for sd in seeds for rc in recipes] if a.mode == "curves"
             else [(rc, 0) for _ in range(a.rounds) for rc in recipes])
    path = os.path.join(a.out, f"{a.tag}_{a.mode}.json")
    for rc, sd in order:
        r = run(a, shape, rc, a.steps, a.skip, sd)
        out["runs"].append(r)
        print(json.dumps({k: v for k, v in r.items() if k != "loss_curve"}), flush=True)
        with open(path, "w") as f:  # each run as it ends: a cut-off command keeps what ran
            json.dump(out, f, indent=1)
    by = {rc: [r["real_tokens_per_s"] for r in out["runs"] if r["recipe"] == rc] for rc in recipes}
    out["tok_s"] = {rc: {"median": statistics.median(v), "min": min(v), "max": max(v)}
                    for rc, v in by.items()}
    if "none" in by:
        base = out["tok_s"]["none"]["median"]
        out["speedup_vs_bf16"] = {rc: out["tok_s"][rc]["median"] / base for rc in by}
        last = {(r["recipe"], r["seed"]): r["loss_last50"] for r in out["runs"]}
        # per seed, against bf16 of the same seed (same init, same data order)
        out["last50_loss_gap_vs_bf16"] = {
            f"{rc} seed {sd}": last[(rc, sd)] / last[("none", sd)] - 1
            for rc in recipes for sd in seeds if (rc, sd) in last and ("none", sd) in last}
    if a.profile:
        out["profile"] = [profile(a, shape, rc, a.profile_steps) for rc in recipes]
        for p in out["profile"]:
            print(json.dumps({k: v for k, v in p.items() if k != "top_kernels"}), flush=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps({k: out[k] for k in out if k in ("tok_s", "speedup_vs_bf16",
                                                      "last50_loss_gap_vs_bf16")}), flush=True)


if __name__ == "__main__":
    main()
