"""Strict multi-rank parity (issue 17): one step of DP, TP+SP, CP and TP x CP against one rank,
on the same weights (TP shards cut from the one-rank weights) and the same sequences
(slabs packed per layout, checked by verify). The harness is tests/parity_harness.py.

    python bench/parity.py pack --work W                      # slabs for every layout (CPU)
    torchrun --nproc-per-node 1 bench/parity.py run --work W --layout 1 --device cuda
    torchrun --nproc-per-node 2 bench/parity.py run --work W --layout dp2 --device cuda
    torchrun --nproc-per-node 2 bench/parity.py run --work W --layout tp2sp --device cuda
    torchrun --nproc-per-node 2 bench/parity.py run --work W --layout cp2 --device cuda
    torchrun --nproc-per-node 4 bench/parity.py run --work W --layout tp2cp2 --device cuda
    python bench/parity.py table --work W --device cuda       # the markdown table

`--device cpu` runs the same under gloo in fp32 (torchrun works on CPU too). `run --layout 1`
writes the reference (W/ref-DEVICE.pt: full weights, loss, full gradients); every other
layout loads it, so run it first. Rows go to W/parity-DEVICE.jsonl, one per run (a new
reference starts the file afresh). Any `[dpN][tpN[sp]][cpN]` layout runs the same way once
`pack --layouts NAME` has packed its slabs (e.g. tp4sp on 4 GPUs, dp2tp2spcp2 on 8).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

from parity_harness import (  # noqa: E402
    LAYOUTS,
    PLANTED_BUGS,
    ParityRow,
    Reference,
    cut_param,
    format_table,
    parse_layout,
    reference_row,
    run_layout,
    run_reference,
)
from parity_data import pack_layouts, take_rows  # noqa: E402

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(HERE, "fixtures")
# GPU default: 200 instruction rows and the five long PEPs (about 5k-22k tokens), whole
GPU_INPUTS = [os.path.join(FIX, "data", "gpteacher_alpaca_200.json"),
              os.path.join(FIX, "data", "peps_long5.jsonl.gz")]
MISTRAL = os.path.join(FIX, "tokenizers", "mistral-7b-v0.1")


def _slabs(work: str) -> dict:
    with open(os.path.join(work, "slabs.json")) as f:
        return json.load(f)


def cmd_pack(a) -> None:
    inputs = [take_rows(s, os.path.join(a.work, "inputs")) for s in (a.inputs or GPU_INPUTS)]
    sets = pack_layouts(inputs, {"tokenizer": a.tokenizer}, a.work,
                        [parse_layout(n) for n in a.layouts], a.capacity)
    info = {name: {"path": s.path, "alignment": s.alignment.describe(), "s": s.alignment.s,
                   "t": s.alignment.t, "slabs": s.slabs, "real_tokens": s.real_tokens,
                   "loss_tokens": s.loss_tokens, "verify": "ok"} for name, s in sets.items()}
    info["_inputs"] = a.inputs or GPU_INPUTS
    path = os.path.join(a.work, "slabs.json")
    if os.path.exists(path):  # packing more layouts later keeps the earlier ones
        old = _slabs(a.work)
        if old.get("_inputs") != info["_inputs"]:
            sys.exit(f"{path} was packed from {old.get('_inputs')}: use another --work")
        info = old | info
    with open(path, "w") as f:
        json.dump(info, f, indent=1)
    for name, s in sets.items():
        print(f"{name:7s} {s.alignment.describe():55s} s={s.alignment.s} t={s.alignment.t} "
              f"slabs {s.slabs} real {s.real_tokens} loss {s.loss_tokens} verify ok")


def _machine(device: str) -> str:
    import torch
    if device == "cuda":
        return torch.cuda.get_device_name()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{platform.processor() or 'cpu'} x{os.cpu_count()} (load {load:.1f})"


def cmd_run(a) -> None:
    import torch

    from packtool.megatron.model import GPTShape, padded_vocab
    slabs = _slabs(a.work)
    ref_path = os.path.join(a.work, f"ref-{a.device}.pt")
    t0 = time.perf_counter()
    if a.layout == "1":
        from packtool.megatron.dataset import PackedSlabDataset
        vocab = padded_vocab(PackedSlabDataset(slabs["ref"]["path"]).manifest.vocab_size, tp=2)
        shape = GPTShape(layers=a.layers, hidden=a.hidden, heads=a.heads, ffn=a.ffn,
                         vocab=vocab, kv_heads=a.kv_heads, max_seq=a.max_seq)
        dtype = torch.bfloat16 if a.device == "cuda" else torch.float32
        ref = run_reference(shape, slabs["ref"]["path"], a.device, dtype, lm_head=a.lm_head)
        ref.save(ref_path)
        row = reference_row(ref)
    else:
        if not os.path.exists(ref_path):
            sys.exit(f"{ref_path} missing: run `torchrun --nproc-per-node 1 bench/parity.py run "
                     f"--work {a.work} --layout 1 --device {a.device}` first")
        ref = Reference.load(ref_path)
        if a.layout not in slabs:
            sys.exit(f"no slabs packed for layout {a.layout}: run `python bench/parity.py pack "
                     f"--work {a.work} --layouts {a.layout} ...` (with the same inputs)")
        lay = parse_layout(a.layout, int(os.environ.get("WORLD_SIZE", "1")))
        row = run_layout(lay, ref, slabs[a.layout]["path"], a.device,
                         lm_head=a.lm_head, cut=PLANTED_BUGS.get(a.plant_bug, cut_param))
        if row is not None and a.plant_bug:
            row.layout = f"{row.layout} + planted bug {a.plant_bug}"
    if row is None:  # not rank 0
        return
    rec = dataclasses.asdict(row) | {
        "passed": row.passed, "seconds": time.perf_counter() - t0, "machine": _machine(a.device),
        "device": a.device, "dtype": str(ref.dtype), "shape": dataclasses.asdict(ref.shape),
        "lm_head": a.lm_head, "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"],
                                 capture_output=True, text=True).stdout.strip()}
    # a new reference starts a new table: earlier rows were measured against another one
    mode = "w" if a.layout == "1" else "a"
    with open(os.path.join(a.work, f"parity-{a.device}.jsonl"), mode) as f:
        f.write(json.dumps(rec) + "\n")
    print(format_table([row]))
    print(row.tol_why)
    if a.plant_bug:  # a self-check: the harness must fail a planted bug
        if row.passed:
            sys.exit(f"planted bug {a.plant_bug} PASSED the check: the harness cannot see it")
    elif not row.passed:
        sys.exit(f"layout {a.layout}: parity FAILED")


def cmd_table(a) -> None:
    path = os.path.join(a.work, f"parity-{a.device}.jsonl")
    rows, last = {}, None
    with open(path) as f:
        for line in f:
            d = json.loads(line)
            fields = {k.name for k in dataclasses.fields(ParityRow)}
            rows[d["layout"]] = ParityRow(**{k: v for k, v in d.items() if k in fields})
            last = d
    print(format_table(list(rows.values())))
    print(f"\ntolerance: {last['tol_why']}; {last['dtype']} on {last['machine']}, "
          f"shape {last['shape']}, lm-head {last['lm_head']}, {last['date']}, "
          f"commit {last['commit']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="pack + verify the slabs of every layout")
    p.add_argument("--work", required=True)
    p.add_argument("--inputs", nargs="*", help="PATH or PATH@A:B / PATH@I (rows); default: "
                   "the alpaca and long-PEP fixtures, whole")
    p.add_argument("--tokenizer", default=MISTRAL)
    p.add_argument("--capacity", type=int, default=32768)
    p.add_argument("--layouts", nargs="*", default=[n for n in LAYOUTS if n != "1"],
                   help="layout names: those of LAYOUTS or [dpN][tpN[sp]][cpN]")
    r = sub.add_parser("run", help="one layout's step (under torchrun for several ranks)")
    r.add_argument("--work", required=True)
    r.add_argument("--layout", required=True,
                   help=f"1 (the reference), {', '.join(n for n in LAYOUTS if n != '1')}, or "
                   "any [dpN][tpN[sp]][cpN] packed by `pack --layouts`; the world comes from "
                   "torchrun")
    r.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    r.add_argument("--lm-head", default="torch", choices=["torch", "fused"])
    r.add_argument("--plant-bug", choices=sorted(PLANTED_BUGS), default=None,
                   help="self-check: run the layout with a planted bug, which must FAIL")
    for name, default in (("layers", 4), ("hidden", 1024), ("heads", 8), ("kv-heads", 8),
                          ("ffn", 2816), ("max-seq", 32768)):
        r.add_argument(f"--{name}", type=int, default=default, help="reference only")
    t = sub.add_parser("table", help="markdown table of the recorded runs")
    t.add_argument("--work", required=True)
    t.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    a = ap.parse_args()
    {"pack": cmd_pack, "run": cmd_run, "table": cmd_table}[a.cmd](a)


if __name__ == "__main__":
    main()
