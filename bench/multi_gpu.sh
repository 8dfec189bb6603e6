#!/usr/bin/env bash
# Two-GPU checks of `packtool train`'s loop (nvidia-h200-x2): 1 GPU reference, DP=2, TP=2+SP,
# CP=2 on the long-document slabs (tp2 cp2 layout), same seed and slabs per step.
#   bash bench/multi_gpu.sh DATA_DIR OUT_DIR [LM_HEAD]
set -euo pipefail
data=$1 out=$2 head=${3:-fused}
common=(--data "$data" --out "$out" --layers 8 --hidden 1024 --heads 8 --ffn 2816 --budget 16384
        --steps 60 --lr 6e-4 --only-packed --lm-head "$head")
python3 bench/train_h200.py "${common[@]}" --grad-accum 2 --tag ref1 > "$out/ref1.log" 2>&1
for run in "dp2 --grad-accum 1" "tp2 --tp 2 --grad-accum 2" "cp2 --cp 2 --grad-accum 2"; do
  set -- $run
  tag=$1; shift
  torchrun --nproc-per-node 2 bench/train_h200.py "${common[@]}" "$@" --tag "$tag" > "$out/$tag.log" 2>&1 \
    || echo "$tag failed (see $tag.log)"
done
python3 - "$out" <<'PY'
import json, sys, glob, os
out = sys.argv[1]
ref = json.load(open(os.path.join(out, "summary_ref1.json")))["packed"]["loss_curve_every5"]
for tag in ("ref1", "dp2", "tp2", "cp2"):
    p = os.path.join(out, f"summary_{tag}.json")
    if not os.path.exists(p):
        print(tag, "no summary"); continue
    s = json.load(open(p))["packed"]
    c = s["loss_curve_every5"]
    print(tag, f"tok/s {s['real_tokens_per_s']:.0f} mfu {s['mfu_989']:.3f} last10 {s['loss_last10']:.3f}",
          "max|dloss| vs 1 GPU", round(max(abs(a - b) for a, b in zip(c, ref)), 3), c)
PY
