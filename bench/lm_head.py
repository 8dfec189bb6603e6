"""LM-head loss benchmark and bf16 accuracy check (H200): packtool's fused kernels in both modes,
torch eager, Liger-Kernel's fused linear cross-entropy, Apple's cut-cross-entropy, and a bf16
matmul, timed in one process on the same inputs.

    python bench/lm_head.py --check --bench --out results.json        # on a GPU
    TRITON_INTERPRET=1 python bench/lm_head.py --smoke                 # CPU, tiny, wiring only

Times are forward+backward medians (CUDA events). Memory is the peak during one fwd+bwd minus what
was allocated before it, minus the returned gradients (hidden and weight): the extra transient
memory each method needs. Hardware FLOPs: 6NHV for three matmuls, 8NHV with logits recompute.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from packtool.kernels import chunking  # noqa: E402
from packtool.kernels import lm_head as L  # noqa: E402


def log(*a):
    print(*a, flush=True)


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, dev, reps, warmup):
    for _ in range(warmup):
        fn()
    sync(dev)
    times = []
    for _ in range(reps):
        if dev.type == "cuda":
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2]


def extra_memory(fn, leaves, dev):
    """Peak bytes of one call beyond what existed before and the gradients it leaves on `leaves`."""
    if dev.type != "cuda":
        return float("nan")
    for x in leaves:
        x.grad = None
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn(keep_grads=True)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    grads = sum(x.grad.numel() * x.grad.element_size() for x in leaves if x.grad is not None)
    for x in leaves:
        x.grad = None
    return peak - base - grads


def make_methods(h, w, t, lw, t_ignore, dev):
    """name -> fwd+bwd closure. lw zero rows are inactive; t_ignore has -100 there (Liger, CCE)."""
    g = torch.Generator(device=dev).manual_seed(1)
    g_lp = torch.randn(h.shape[0], generator=g, device=dev)
    g_ent = 0.1 * torch.randn(h.shape[0], generator=g, device=dev)
    methods = {}

    def wrap(loss_fn):
        def run(keep_grads=False):
            h.grad = None
            w.grad = None
            loss_fn().backward()
            if not keep_grads:
                h.grad = None
                w.grad = None
        return run

    def rl(impl):
        def f():
            lp, ent = L.fused_linear_logprobs_entropy(h, w, t, 0.9, lw, impl=impl)
            return (lp * g_lp).sum() + (ent * g_ent).sum()
        return f

    methods["packtool_ce"] = wrap(lambda: L.fused_linear_cross_entropy(h, w, t, lw))
    methods["packtool_logprobs_entropy"] = wrap(rl("fused"))
    methods["torch_eager_ce"] = wrap(lambda: L.fused_linear_cross_entropy(h, w, t, lw, impl="torch"))
    methods["torch_eager_logprobs_entropy"] = wrap(rl("torch"))
    try:
        from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

        methods["liger_flce"] = wrap(lambda: liger_fused_linear_cross_entropy(h, w, t_ignore, reduction="sum"))
    except Exception as exc:  # reported, not fatal: the other columns still mean something
        log(f"liger unavailable: {exc!r}")
    try:
        from cut_cross_entropy import linear_cross_entropy

        methods["cce"] = wrap(lambda: linear_cross_entropy(h, w, t_ignore, reduction="sum"))
    except Exception as exc:
        log(f"cut-cross-entropy unavailable: {exc!r}")
    return methods


def inputs(n, hdim, v, dev, dtype, frac_active, logit_std=2.0, seed=0):
    g = torch.Generator(device=dev).manual_seed(seed)
    h = torch.randn(n, hdim, generator=g, device=dev).to(dtype)
    w = (torch.randn(v, hdim, generator=g, device=dev) * (logit_std / hdim**0.5)).to(dtype)
    t = torch.randint(0, v, (n,), generator=g, device=dev)
    lw = torch.ones(n, device=dev)
    if frac_active < 1:
        lw[torch.rand(n, generator=g, device=dev) >= frac_active] = 0
    t_ignore = torch.where(lw != 0, t, torch.full_like(t, -100))
    return h.requires_grad_(), w.requires_grad_(), t, lw, t_ignore


def rel(a, b):
    a, b = a.detach().double(), b.detach().double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def check(n, hdim, v, dev, dtype):
    """bf16 fused vs fp32 dense reference on the same (bf16-valued) inputs; extreme-logit NaN check."""
    out = {}
    h, w, t, lw, _ = inputs(n, hdim, v, dev, dtype, 0.75)
    h32 = h.detach().float().requires_grad_()
    w32 = w.detach().float().requires_grad_()
    ref = L.fused_linear_cross_entropy(h32, w32, t, lw, impl="torch")
    ref.backward()
    loss = L.fused_linear_cross_entropy(h, w, t, lw)
    loss.backward()
    out["ce"] = {"loss_rel": rel(loss, ref), "grad_hidden_rel": rel(h.grad, h32.grad),
                 "grad_weight_rel": rel(w.grad, w32.grad)}
    for x in (h, w, h32, w32):
        x.grad = None
    del ref
    g = torch.Generator(device=dev).manual_seed(2)
    g_lp, g_ent = torch.randn(n, generator=g, device=dev), torch.randn(n, generator=g, device=dev)
    lp_r, ent_r = L.fused_linear_logprobs_entropy(h32, w32, t, 0.9, lw, impl="torch")
    ((lp_r * g_lp).sum() + (ent_r * g_ent).sum()).backward()
    lp, ent = L.fused_linear_logprobs_entropy(h, w, t, 0.9, lw)
    ((lp * g_lp).sum() + (ent * g_ent).sum()).backward()
    out["logprobs_entropy"] = {
        "logprob_max_abs": (lp - lp_r).abs().max().item(), "entropy_max_abs": (ent - ent_r).abs().max().item(),
        "logprob_rel": rel(lp, lp_r), "entropy_rel": rel(ent, ent_r),
        "grad_hidden_rel": rel(h.grad, h32.grad), "grad_weight_rel": rel(w.grad, w32.grad)}
    del lp_r, ent_r, h32, w32
    for x in (h, w):
        x.grad = None
    # extreme logits: std ~ 2e4, far beyond where a naive exp overflows
    he = (h.detach() * 1e4).requires_grad_()
    loss = L.fused_linear_cross_entropy(he, w, t, lw)
    loss.backward()
    lp, ent = L.fused_linear_logprobs_entropy(he, w, t, 1.0, lw)
    (lp.sum() + ent.sum()).backward()
    finite = all(bool(torch.isfinite(x).all()) for x in (loss, lp, ent, he.grad, w.grad))
    out["extreme_logits_finite"] = finite
    out["pass"] = finite and all(
        out[k][m] < 1e-2 for k in ("ce", "logprobs_entropy") for m in ("grad_hidden_rel", "grad_weight_rel"))
    return out


def bench(n, hdim, v, dev, dtype, frac_active, reps, warmup, only=None, logit_std=2.0):
    """Interleaved timing: each round times every method once, in a rotated order, so a change
    of the GPU's power state (~7% on an H200) lands on all methods alike. Median and min-max."""
    h, w, t, lw, t_ignore = inputs(n, hdim, v, dev, dtype, frac_active, logit_std)
    methods = {k: f for k, f in make_methods(h, w, t, lw, t_ignore, dev).items() if not only or k in only}
    res, times = {}, {k: [] for k in methods}
    for name, fn in methods.items():
        try:
            timed(fn, dev, 1, warmup)
        except Exception as exc:
            res[name] = {"error": repr(exc)[:300]}
            log(f"  {name:30s} FAILED {exc!r}"[:300])
    live = [k for k in methods if k not in res]
    for r in range(reps):
        for name in live[r % len(live):] + live[:r % len(live)]:
            times[name].append(timed(methods[name], dev, 1, 0))
    for name in live:
        ts = sorted(times[name])
        ms = ts[len(ts) // 2]
        mem = extra_memory(methods[name], (h, w), dev)
        flops = (8 if "logprobs" in name and "eager" not in name else 6) * n * hdim * v
        res[name] = {"ms": ms, "ms_min": ts[0], "ms_max": ts[-1], "extra_MiB": mem / 2**20,
                     "TFLOPs": flops / ms / 1e9}
        log(f"  {name:30s} {ms:8.2f} ms ({ts[0]:.2f}-{ts[-1]:.2f})  {mem / 2**20:9.1f} MiB extra")
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    return res


def matmul_tflops(n, hdim, v, dev, dtype, reps, warmup):
    a = torch.randn(n, hdim, device=dev).to(dtype)
    b = torch.randn(v, hdim, device=dev).to(dtype)
    ms = timed(lambda: torch.mm(a, b.t()), dev, reps, warmup)
    return {"ms": ms, "TFLOPs": 2 * n * hdim * v / ms / 1e9}


def profile(n, hdim, v, dev, dtype, frac_active):
    """Where one fwd+bwd of each mode spends GPU time (matmuls vs row kernels vs gathers)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    h, w, t, lw, t_ignore = inputs(n, hdim, v, dev, dtype, frac_active)
    methods = make_methods(h, w, t, lw, t_ignore, dev)
    tables = {}
    for name in ("packtool_ce", "packtool_logprobs_entropy"):
        methods[name]()
        torch.cuda.synchronize()
        with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
            methods[name]()
            torch.cuda.synchronize()
        tables[name] = prof.key_averages().table(sort_by="cuda_time_total", row_limit=16)
        log(f"profile {name} V={v} active={frac_active}\n{tables[name]}")
    return tables


def versions():
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("triton", "liger-kernel", "cut-cross-entropy"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def kernel_configs():
    from packtool.kernels import row_stats, softmax_grad

    out = {}
    for mod in (row_stats, softmax_grad):
        built = mod._KERNEL._built.get(False)
        cache = getattr(built, "cache", {}) if built is not None else {}
        out[mod.__name__] = {str(k): str(c) for k, c in cache.items()}
    return out


def _tp_worker(rank, world, n, hdim, v, init_file, out_file, cuda):
    """Vocab-parallel fused CE and log-probs over `world` GPUs (NCCL) vs the unsharded fused run
    (CPU gloo ranks under the interpreter for --smoke)."""
    import torch.distributed as dist

    if cuda:
        torch.cuda.set_device(rank)
    backend = "nccl" if cuda else "gloo"
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world)
    dev = torch.device("cuda", rank) if cuda else torch.device("cpu")
    h, w, t, lw, _ = inputs(n, hdim, v, dev, torch.bfloat16 if cuda else torch.float32, 0.75)
    shard = slice(rank * v // world, (rank + 1) * v // world)
    w_loc = w.detach()[shard].clone().requires_grad_()
    res = {}
    for mode in ("ce", "logprobs_entropy"):
        def run(weight, group):
            h.grad = None
            weight.grad = None
            if mode == "ce":
                out = L.fused_linear_cross_entropy(h, weight, t, lw, tp_group=group)
            else:
                lp, ent = L.fused_linear_logprobs_entropy(h, weight, t, 0.9, lw, tp_group=group)
                out = lp.sum() + 0.1 * ent.sum()
            out.backward()
            return out.detach(), h.grad, weight.grad
        full = run(w, None)
        tp = run(w_loc, dist.group.WORLD)
        ms = timed(lambda: run(w_loc, dist.group.WORLD), dev, 5, 2)
        res[mode] = {"out_rel": rel(tp[0], full[0]), "grad_hidden_rel": rel(tp[1], full[1]),
                     "grad_weight_rel": rel(tp[2], full[2][shard]), "ms_per_rank": ms}
    if rank == 0:
        Path(out_file).write_text(json.dumps(res))
    dist.destroy_process_group()


def tp_check(n, hdim, v, cuda=True):
    import tempfile

    import torch.multiprocessing as mp

    world = torch.cuda.device_count() if cuda else 2
    if world < 2:
        return {"skipped": f"{world} GPU(s): vocab parallel needs 2"}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "tp.json")
        mp.spawn(_tp_worker, args=(world, n, hdim, v, os.path.join(tmp, "init"), out, cuda), nprocs=world)
        return {"world": world, **json.loads(Path(out).read_text())}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--sweep", action="store_true", help="time packtool_ce over chunk sizes")
    ap.add_argument("--tp", action="store_true", help="vocab-parallel check over all visible GPUs")
    ap.add_argument("--profile", action="store_true", help="kernel time table of both modes")
    ap.add_argument("--smoke", action="store_true", help="tiny CPU run under TRITON_INTERPRET=1")
    ap.add_argument("--out", default=None)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--logit-std", type=float, nargs="+", default=[2.0],
                    help="logit scales to time at (CCE's gradient filter makes its time depend on it)")
    args = ap.parse_args()
    if args.smoke:
        dev, dtype, n, hdim, vocabs, reps, warmup = torch.device("cpu"), torch.float32, 64, 32, (300,), 1, 0
    else:
        dev, dtype, n, hdim, vocabs, reps, warmup = torch.device("cuda"), torch.bfloat16, 16384, 4096, (131072, 151936), args.reps, 2
    result = {"device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu",
              "torch": torch.__version__, "versions": versions(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "N": n, "H": hdim, "dtype": str(dtype)}
    for v in vocabs:
        key = f"V{v}"
        result[key] = {"chunk_rows": chunking.default_chunk_rows(hdim, v, torch.tensor([], dtype=dtype).element_size())}
        if args.check:
            log(f"check V={v}")
            try:
                result[key]["check"] = check(n, hdim, v, dev, dtype)
            except Exception:  # keep going: the timings are still worth having
                import traceback

                result[key]["check"] = {"error": traceback.format_exc()[-2000:]}
            log("  ", json.dumps(result[key]["check"]))
        if args.bench:
            result[key]["matmul"] = matmul_tflops(n, hdim, v, dev, dtype, reps, warmup)
            log(f"bench V={v} matmul {result[key]['matmul']}")
            for std in args.logit_std:
                for frac in (1.0, 0.5):
                    log(f"bench V={v} active={frac} logit_std={std}")
                    tag = f"active_{frac}" + ("" if std == 2.0 else f"_std{std}")
                    result[key][tag] = bench(n, hdim, v, dev, dtype, frac, reps, warmup, logit_std=std)
        if args.sweep:
            sweep = {}
            for rows in (512, 768, 1024, 1280, 1536):
                budget = chunking.LOGITS_BUDGET_BYTES
                chunking.LOGITS_BUDGET_BYTES = rows * v * (2 if dtype == torch.bfloat16 else 4)
                log(f"sweep V={v} chunk_rows={rows}")
                sweep[rows] = bench(n, hdim, v, dev, dtype, 1.0, reps, warmup,
                                    only=("packtool_ce", "packtool_logprobs_entropy"))
                chunking.LOGITS_BUDGET_BYTES = budget
            result[key]["sweep"] = sweep
        if args.profile and dev.type == "cuda":
            result[key]["profile"] = {
                f"active_{f}": profile(n, hdim, v, dev, dtype, f) for f in (1.0, 0.5)
            }
        if args.out:
            Path(args.out).write_text(json.dumps(result, indent=1))
    if args.tp:
        log(f"tp check V={vocabs[0]}")
        try:
            result["tp"] = tp_check(n, hdim, vocabs[0], cuda=dev.type == "cuda")
        except Exception:
            import traceback

            result["tp"] = {"error": traceback.format_exc()[-2000:]}
        log("  ", json.dumps(result["tp"]))
    result["autotuned"] = kernel_configs()
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    log(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
