"""Sample-support scoring (packtool/kernels/support_logprob.py) on a GPU: time, peak extra memory and bf16
accuracy, beside packtool's full-vocabulary fused log-prob and a chunked torch gather.

  acc    bf16 against the dense fp64 reference (N 2048, H 4096, V 151,936): relative L2 of logp,
         entropy, dh, dW for the gather path (atomic and deterministic dW) and the dense path
  main   H 4096, V 151,936, 16k tokens, K in 2/20/64/512 (+ 1024/2048/4096 for the rule): fwd and
         fwd+bwd time, methods interleaved over --rounds rounds (median of --reps per round), and
         peak extra memory of fwd+bwd (beyond inputs and the returned gradients)
  sweep  fwd and fwd+bwd of impl='auto' and of the full-vocab fused log-prob over H 2048/4096/8192,
         V 151,936/248,320, TP 1/2/8 (one rank's share: V/TP weight rows, K/TP owned candidates;
         collectives not included), tokens 16k/64k, K 2/20/64/512/2048/4096; one round, median
         of --reps // 2
  union  the dense path over the union of the candidate ids vs over the whole vocabulary: H 4096,
         V 151,936, 16k tokens, K in --union-ks, cold candidates drawn from the first --union-pools
         ids (a peaked model's top-k / top-p candidates: the union is a part of the vocabulary);
         fwd and fwd+bwd of union, dense, auto and the full-vocab fused log-prob, interleaved

Supports: each row draws a quarter of its candidates (at most 32) from 64 hot ids, the rest
spread over the vocabulary, in random order; rows are cut to a random length in [1, K] (top-p).

    python bench/support_logprob.py --parts acc,main,sweep --out OUT/support.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from packtool.kernels import lm_head as L  # noqa: E402
from packtool.kernels.reference import torch_reference_support_logprob  # noqa: E402
from packtool.kernels.support_check import check_support  # noqa: E402
from packtool.kernels.support_logprob import support_logprob  # noqa: E402
from packtool.kernels.support_path import (GATHER_MAX_SHARE, UNION_MAX_SHARE, UNION_PREFIX,  # noqa: E402
                                           UNION_PROBE, auto_path, speculate_dense, triton_runs)

STRIDE = 7919  # a prime: cold ids off + j * STRIDE are distinct when it is coprime to the range


def log(*a):
    print(*a, flush=True)


def make_support(n, v, k, g, hot=64, pool=None):
    """(sampled [n], support [n, k] int32): distinct ids per row, trailing -1 after a random cut.
    pool: cold ids come from [hot, pool) only (default: the whole vocabulary)."""
    dev = g.device
    kh = min(k // 4, 32)
    span = (pool or v) - hot
    assert math.gcd(STRIDE, span) == 1 and k - kh < span
    hot_ids = torch.rand(n, hot, generator=g, device=dev).argsort(1)[:, :kh]
    off = torch.randint(0, span, (n, 1), generator=g, device=dev)
    cold = hot + (off + torch.arange(k - kh, device=dev)[None, :] * STRIDE) % span
    sup = torch.cat([hot_ids, cold], 1)
    sup = sup.gather(1, torch.rand(n, k, generator=g, device=dev).argsort(1)).int()
    cut = torch.randint(1, k + 1, (n,), generator=g, device=dev)
    sup[torch.arange(k, device=dev)[None, :] >= cut[:, None]] = -1
    col = (torch.rand(n, generator=g, device=dev) * cut).long()
    return sup.gather(1, col[:, None]).squeeze(1).long(), sup


def inputs(n, hdim, v, k, seed=0, pool=None):
    g = torch.Generator(device="cuda").manual_seed(seed)
    h = torch.randn(n, hdim, generator=g, device="cuda").bfloat16().requires_grad_()
    w = (torch.randn(v, hdim, generator=g, device="cuda") * (2.0 / hdim**0.5)).bfloat16().requires_grad_()
    samp, sup = make_support(n, v, k, g, pool=pool)
    up = torch.randn(2, n, generator=g, device="cuda")
    return h, w, samp, sup, up


def methods(h, w, samp, sup, up, names):
    def sup_fn(**kw):
        def f(bwd):
            lp, ent, _ = support_logprob(h, w, samp, sup, temperature=0.9, entropy=True, **kw)
            if bwd:
                ((lp * up[0]).sum() + (ent * up[1]).sum()).backward()
        return f

    def full(bwd):
        lp, ent = L.fused_linear_logprobs_entropy(h, w, samp, 0.9)
        if bwd:
            ((lp * up[0]).sum() + (ent * up[1]).sum()).backward()

    table = {"auto": sup_fn(), "gather": sup_fn(impl="gather"),
             "gather_det": sup_fn(impl="gather", deterministic=True), "dense": sup_fn(impl="dense"),
             "union": sup_fn(impl="union"),
             "torch_gather": sup_fn(impl="torch"), "full_fused": full}
    return {m: table[m] for m in names}


def auto_pick(h, w, samp, sup, train: bool) -> str:
    """The path impl='auto' takes for these inputs (train: a call that runs backward)."""
    if not train and speculate_dense("auto", triton_runs(h), False, h, w, sup.shape[1], w.shape[0]):
        return "dense (speculated)"
    rows = check_support(samp, sup, w.shape[0], 0, w.shape[0], use_triton=triton_runs(h))
    with torch.set_grad_enabled(train):
        return auto_path(h, w, rows)[0]


def time_ms(fn, bwd, leaves, reps, warmup=1):
    for _ in range(warmup):
        fn(bwd)
    times = []
    for _ in range(reps):
        for x in leaves:
            x.grad = None
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        with torch.no_grad() if not bwd else torch.enable_grad():
            fn(bwd)
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    for x in leaves:
        x.grad = None
    return sorted(times)[len(times) // 2]


def extra_mib(fn, leaves):
    for x in leaves:
        x.grad = None
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn(True)
    torch.cuda.synchronize()
    grads = sum(x.grad.numel() * x.grad.element_size() for x in leaves if x.grad is not None)
    peak = torch.cuda.max_memory_allocated() - base - grads
    for x in leaves:
        x.grad = None
    return peak / 2**20


def rel(a, b):
    a, b = a.detach().double(), b.detach().double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def accuracy(n=2048, hdim=4096, v=151936):
    rows = []
    for k, impls in ((64, (("gather", False), ("gather", True), ("dense", False))), (512, (("dense", False),))):
        h, w, samp, sup, up = inputs(n, hdim, v, k, seed=3)
        hh, ww = h.detach().double().requires_grad_(), w.detach().double().requires_grad_()
        lp, ent, _ = torch_reference_support_logprob(hh, ww, samp, sup, 0.9)
        ((lp * up[0].double()).sum() + (ent * up[1].double()).sum()).backward()
        ref = (lp.detach(), ent.detach(), hh.grad, ww.grad)
        for impl, det in impls:
            h.grad = w.grad = None
            a, b, _ = support_logprob(h, w, samp, sup, temperature=0.9, entropy=True, impl=impl,
                                      deterministic=det)
            ((a * up[0]).sum() + (b * up[1]).sum()).backward()
            r = {"K": k, "impl": impl, "deterministic": det}
            for name, x, y in zip(("logp", "entropy", "dh", "dW"), (a, b, h.grad, w.grad), ref):
                r[name + "_relL2"] = rel(x, y)
            rows.append(r)
            log(json.dumps(r))
        del hh, ww, ref
        torch.cuda.empty_cache()
    return rows


def main_grid(rounds, reps, ks=(2, 20, 64, 512), rule_ks=(1024, 2048, 4096), n=16384, hdim=4096, v=151936,
              names=("auto", "gather", "gather_det", "dense", "torch_gather", "full_fused")):
    rows = []
    names = list(names)
    for k in ks + rule_ks:
        h, w, samp, sup, up = inputs(n, hdim, v, k)
        use = names if k in ks else ["gather", "dense", "full_fused"]
        fns = methods(h, w, samp, sup, up, use)
        res = {m: {"fwd": [], "fwdbwd": []} for m in use}
        for _ in range(rounds):  # interleaved: every method once per round
            for m, fn in fns.items():
                for mode in ("fwd", "fwdbwd"):
                    res[m][mode].append(time_ms(fn, mode == "fwdbwd", (h, w), reps))
        owned = int((sup >= 0).sum())
        for m, fn in fns.items():
            r = {"K": k, "N": n, "H": hdim, "V": v, "method": m, "owned_share": owned / (n * v),
                 "auto_picks_train": auto_pick(h, w, samp, sup, True),
                 "auto_picks_forward": auto_pick(h, w, samp, sup, False),
                 "extra_MiB": extra_mib(fn, (h, w))}
            for mode in ("fwd", "fwdbwd"):
                t = sorted(res[m][mode])
                r[mode + "_ms"] = t[len(t) // 2]
                r[mode + "_min_max"] = [t[0], t[-1]]
            rows.append(r)
            log(json.dumps(r))
        del h, w, fns
        torch.cuda.empty_cache()
    return rows


def union_grid(rounds, reps, ks, pools, n=16384, hdim=4096, v=151936,
               names=("union", "dense", "auto", "full_fused")):
    rows = []
    for k in ks:
        for pool in pools:
            h, w, samp, sup, up = inputs(n, hdim, v, k, seed=k, pool=min(pool, v))
            fns = methods(h, w, samp, sup, up, list(names))
            res = {m: {"fwd": [], "fwdbwd": []} for m in fns}
            for _ in range(rounds):  # interleaved: every method once per round
                for m, fn in fns.items():
                    for mode in ("fwd", "fwdbwd"):
                        res[m][mode].append(time_ms(fn, mode == "fwdbwd", (h, w), reps))
            u = int(torch.unique(sup[sup >= 0]).numel())
            for m in fns:
                r = {"K": k, "N": n, "H": hdim, "V": v, "pool": min(pool, v), "union": u, "union_share": u / v,
                     "method": m, "auto_picks_train": auto_pick(h, w, samp, sup, True), "extra_MiB": extra_mib(fns[m], (h, w))}
                for mode in ("fwd", "fwdbwd"):
                    t = sorted(res[m][mode])
                    r[mode + "_ms"] = t[len(t) // 2]
                    r[mode + "_min_max"] = [t[0], t[-1]]
                rows.append(r)
                log(json.dumps(r))
            del h, w, fns
            torch.cuda.empty_cache()
    return rows


def sweep(reps, ks=(2, 20, 64, 512, 2048, 4096), modes=("fwd", "fwdbwd"), rounds=1):
    """rounds 1: the full head timed once per shape (its time does not depend on K); rounds > 1:
    auto and the full head interleaved at every K, median (min-max) over the rounds."""
    rows = []
    for n in (16384, 65536):
        for hdim in (2048, 4096, 8192):
            for v in (151936, 248320):
                for tp in (1, 2, 8):
                    vl = v // tp
                    full = None
                    for k in ks:
                        kl = max(1, k // tp)
                        h, w, samp, sup, up = inputs(n, hdim, vl, kl, seed=k)
                        fns = methods(h, w, samp, sup, up, ["auto", "full_fused"])
                        r = {"N": n, "H": hdim, "V": v, "TP": tp, "V_local": vl, "K": k, "K_local": kl,
                             "auto_picks_train": auto_pick(h, w, samp, sup, True),
                             "auto_picks_forward": auto_pick(h, w, samp, sup, False)}
                        if rounds > 1:
                            t = {m: {"auto": [], "full_fused": []} for m in modes}
                            for _ in range(rounds):
                                for m in modes:
                                    for name in ("full_fused", "auto"):
                                        t[m][name].append(time_ms(fns[name], m == "fwdbwd", (h, w), reps))
                            for m in modes:
                                a, f = sorted(t[m]["auto"]), sorted(t[m]["full_fused"])
                                r.update({f"auto_{m}_ms": a[len(a) // 2], f"auto_{m}_min_max": [a[0], a[-1]],
                                          f"full_fused_{m}_ms": f[len(f) // 2],
                                          f"full_fused_{m}_min_max": [f[0], f[-1]],
                                          f"speedup_{m}": f[len(f) // 2] / a[len(a) // 2]})
                        else:
                            if full is None:  # the full head's time does not depend on K
                                full = {m: time_ms(fns["full_fused"], m == "fwdbwd", (h, w), reps)
                                        for m in modes}
                            t = {m: time_ms(fns["auto"], m == "fwdbwd", (h, w), reps) for m in modes}
                            for m in modes:
                                r.update({f"auto_{m}_ms": t[m], f"full_fused_{m}_ms": full[m],
                                          f"speedup_{m}": full[m] / t[m]})
                        rows.append(r)
                        log(json.dumps(r))
                        del h, w, fns
                    torch.cuda.empty_cache()
    return rows


def one_block_ab(rounds, reps):
    """Forward of impl='auto' with the buffer kernel's whole-row block (support_kernels.ONE_BLOCK_K,
    rows wider than 1024) and with 256-wide blocks (ONE_BLOCK_K 0), interleaved with the full head, at the sweep's worst
    forward shapes (N, H, V_local, K_local)."""
    from packtool.kernels import support_kernels as SK

    rows, keep = [], SK.ONE_BLOCK_K
    for n, hdim, vl, kl in ((16384, 2048, 18992, 256), (16384, 2048, 18992, 512),
                            (16384, 2048, 151936, 4096), (16384, 4096, 151936, 2048)):
        h, w, samp, sup, up = inputs(n, hdim, vl, kl, seed=kl)
        fns = methods(h, w, samp, sup, up, ["auto", "full_fused"])
        t = {"one_block": [], "blocks_256": [], "full_fused": []}
        for _ in range(rounds):
            for name in t:
                SK.ONE_BLOCK_K = 0 if name == "blocks_256" else keep
                t[name].append(time_ms(fns["full_fused" if name == "full_fused" else "auto"], False, (h, w), reps))
        SK.ONE_BLOCK_K = keep
        r = {"N": n, "H": hdim, "V_local": vl, "K_local": kl}
        for name, x in t.items():
            x = sorted(x)
            r[name + "_fwd_ms"], r[name + "_min_max"] = x[len(x) // 2], [x[0], x[-1]]
        rows.append(r)
        log(json.dumps(r))
        del h, w, fns
        torch.cuda.empty_cache()
    return rows


def _ints(text):
    return tuple(int(x) for x in text.split(",") if x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--parts", default="acc,main,sweep")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--ks", default="2,20,64,512", help="main: K of every method")
    ap.add_argument("--rule-ks", default="1024,2048,4096", help="main: K of gather/dense/full only")
    ap.add_argument("--methods", default="auto,gather,gather_det,dense,torch_gather,full_fused")
    ap.add_argument("--union-ks", default="512,2048")
    ap.add_argument("--sweep-ks", default="2,20,64,512,2048,4096")
    ap.add_argument("--sweep-modes", default="fwd,fwdbwd")
    ap.add_argument("--sweep-rounds", type=int, default=1, help="sweep: >1 interleaves auto and the full head")
    ap.add_argument("--union-pools", default="8192,32768,151936")
    a = ap.parse_args()
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load": os.getloadavg(),
           "gather_max_share": GATHER_MAX_SHARE, "union_max_share": UNION_MAX_SHARE, "union_probe": UNION_PROBE,
           "union_prefix": UNION_PREFIX}
    for part in a.parts.split(","):
        t0 = time.time()
        res[part] = {"acc": accuracy, "main": lambda: main_grid(
                         a.rounds, a.reps, _ints(a.ks), _ints(a.rule_ks), names=a.methods.split(",")),
                     "sweep": lambda: sweep(max(1, a.reps // 2), _ints(a.sweep_ks), tuple(a.sweep_modes.split(",")),
                                               a.sweep_rounds),
                     "ab": lambda: one_block_ab(a.rounds, a.reps),
                     "union": lambda: union_grid(a.rounds, a.reps, _ints(a.union_ks), _ints(a.union_pools))}[part]()
        log(f"{part}: {time.time() - t0:.0f} s")
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
