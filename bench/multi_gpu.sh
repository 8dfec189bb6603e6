#!/usr/bin/env bash
# Multi-GPU checks of `packtool train` (issue 17). Each phase fits one 10-minute device call.
#
#   bash bench/multi_gpu.sh parity OUT [cpu]      # strict one-step parity (bench/parity.py):
#        pack + verify on CPU, reference on 1 GPU, DP=2 / TP=2+SP / CP=2 on 2 GPUs, and
#        TP=2 x CP=2 when 4 GPUs are visible; prints the table. `cpu`: the same under gloo
#        (fp32) with a small model and slabs; PACK_ARGS / SHAPE_ARGS override either.
#   bash bench/multi_gpu.sh throughput OUT [DATA] # real tok/s per layout beside 1 GPU, 30 steps
#        of the 834 M model (bench/train_h200.py --only-packed), 4 slabs per step on every
#        layout; DATA defaults to 4 fixture slabs of <= 20,480 tokens packed for TP=2 x CP=2
#   bash bench/multi_gpu.sh fit OUT LAYOUT        # largest model LAYOUT fits: a ladder of shapes,
#        3 steps each, until one fails; LAYOUT is one of 1 dp2 tp2 cp2 tp2cp2
#   bash bench/multi_gpu.sh DATA OUT [LM_HEAD]    # the older 60-step loss curves (kept as was)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}
ngpu() { "$py" -c "import torch; print(torch.cuda.device_count())"; }

# layout -> "nproc extra-train-flags grad-accum" (same global batch: 4 slabs per step)
declare -A LAYOUT=([1]="1 --grad-accum 4" [dp2]="2 --grad-accum 2" [tp2]="2 --tp 2 --grad-accum 4"
                   [cp2]="2 --cp 2 --grad-accum 4" [tp2cp2]="4 --tp 2 --cp 2 --grad-accum 4")

launch() {  # nproc, then the script and its arguments; $TMO (seconds) bounds the run
  local n=$1; shift
  local t=(); [ -n "${TMO:-}" ] && t=(timeout "$TMO")
  if [ "$n" = 1 ]; then "${t[@]}" "$py" "$@"
  else "${t[@]}" torchrun --standalone --nproc-per-node "$n" "$@"; fi
}

parity() {  # PACK_ARGS / SHAPE_ARGS override the slabs and the model (cpu: small defaults)
  local out=$1 dev=${2:-cuda} n
  local pack=(${PACK_ARGS:-}) shape=(${SHAPE_ARGS:-})
  if [ "$dev" = cpu ]; then
    n=4
    [ ${#pack[@]} -gt 0 ] || pack=(--inputs "$here/fixtures/data/gpteacher_alpaca_200.json@0:96"
                                 "$here/fixtures/data/peps_long5.jsonl.gz@2" --capacity 6144)
    [ ${#shape[@]} -gt 0 ] || shape=(--layers 4 --hidden 128 --heads 4 --kv-heads 2 --ffn 352
                                   --max-seq 8192)
  else
    n=$(ngpu)
  fi
  mkdir -p "$out"
  [ -f "$out/slabs.json" ] || "$py" "$here/bench/parity.py" pack --work "$out" "${pack[@]}"
  launch 1 "$here/bench/parity.py" run --work "$out" --layout 1 --device "$dev" "${shape[@]}"
  for l in dp2 tp2sp cp2; do
    launch 2 "$here/bench/parity.py" run --work "$out" --layout "$l" --device "$dev" || echo "$l FAILED"
  done
  for bug in naive-fc1 unreduced-norms; do  # self-check: these must FAIL (the run exits 0 if so)
    launch 2 "$here/bench/parity.py" run --work "$out" --layout tp2sp --device "$dev" \
      --plant-bug "$bug" || echo "planted bug $bug was NOT caught"
  done
  if [ "$n" -ge 4 ]; then
    launch 4 "$here/bench/parity.py" run --work "$out" --layout tp2cp2 --device "$dev" || echo "tp2cp2 FAILED"
  else
    echo "tp2cp2 NOT RUN: $n GPUs visible, it needs 4"
  fi
  "$py" "$here/bench/parity.py" table --work "$out" --device "$dev"
}

tput_data() {  # 4 slabs of up to 20,480 tokens packed for TP=2 x CP=2 (they fit every layout):
  # the alpaca and ShareGPT fixtures and four long PEPs (the ~22k-token one left out)
  local w=$1/tput-slabs f=$here/fixtures/data
  [ -f "$w/slabs.json" ] || "$py" "$here/bench/parity.py" pack --work "$w" --layouts tp2cp2 \
    --capacity 20480 --inputs "$f/gpteacher_alpaca_200.json" "$f/fastchat_sharegpt_120.json" \
    "$f/peps_long5.jsonl.gz@0:3" "$f/peps_long5.jsonl.gz@4" >&2
  echo "$w/slabs-tp2-cp2-sp1"
}

throughput() {
  local out=$1 data=${2:-}
  mkdir -p "$out"
  [ -n "$data" ] || data=$(tput_data "$out")
  local n; n=$(ngpu)
  for l in 1 dp2 tp2 cp2 tp2cp2; do
    set -- ${LAYOUT[$l]}
    local np=$1; shift
    if [ "$np" -gt "$n" ]; then echo "$l NOT RUN: needs $np GPUs, $n visible"; continue; fi
    launch "$np" "$here/bench/train_h200.py" --data "$data" --out "$out/tput" --only-packed \
      --steps 30 --budget 20480 --lm-head fused --tag "tput_$l" "$@" > "$out/tput_$l.log" 2>&1 \
      || echo "$l failed (see $out/tput_$l.log)"
  done
  "$py" - "$out/tput" <<'PY'
import json, os, sys
d = sys.argv[1]
print("| layout | GPUs | real tok/s (all GPUs) | per GPU | vs 1 GPU | MFU vs 989 | peak GiB (rank 0) |")
print("|---|---|---|---|---|---|---|")
base = None
for l in ("1", "dp2", "tp2", "cp2", "tp2cp2"):
    p = os.path.join(d, f"summary_tput_{l}.json")
    if not os.path.exists(p):
        print(f"| {l} | - | not run | | | | |"); continue
    s = json.load(open(p)); k = s["packed"]; t = k["real_tokens_per_s"]; base = base or t
    print(f"| {l} | {s['world']} | {t:,.0f} | {t / s['world']:,.0f} | {t / base:.2f}x | "
          f"{100 * k['mfu_989']:.1f} % | {s.get('peak_mem_gib', float('nan')):.1f} |")
PY
}

fit() {
  local out=$1 l=$2 data
  mkdir -p "$out"
  data=$(tput_data "$out")
  set -- ${LAYOUT[$l]}
  local np=$1; shift
  local flags=("$@")
  # layers hidden heads ffn, about 1.3 / 2.7 / 6.7 / 13 / 20 / 30 B parameters (Llama-like)
  for s in "24 2048 16 5632" "32 2560 20 6912" "32 4096 32 11008" "40 5120 40 13824" \
           "44 6144 48 16384" "60 6656 52 17920"; do
    set -- $s
    local tag="fit_${l}_$1x$2"
    if TMO=540 launch "$np" "$here/bench/train_h200.py" --data "$data" --out "$out/fit" \
        --only-packed --steps 3 --budget 20480 --lm-head fused --layers "$1" --hidden "$2" \
        --heads "$3" --ffn "$4" --tag "$tag" "${flags[@]}" > "$out/$tag.log" 2>&1; then
      "$py" - "$out/fit/summary_$tag.json" "$l" "$1x$2" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(sys.argv[2], sys.argv[3], f"fits: peak {s.get('peak_mem_gib', 0):.1f} GiB (rank 0),",
      f"{s['packed']['real_tokens_per_s']:,.0f} real tok/s")
PY
    elif grep -qi "out of memory" "$out/$tag.log"; then
      echo "$l $1x$2 does NOT fit (CUDA out of memory; $out/$tag.log)"; break
    else
      echo "$l $1x$2 FAILED, not out of memory (timeout 540 s, or see $out/$tag.log)"; break
    fi
  done
}

curves() {  # the 2026-11-30 loss-curve run, unchanged
  local data=$1 out=$2 head=${3:-fused}
  local common=(--data "$data" --out "$out" --layers 8 --hidden 1024 --heads 8 --ffn 2816
                --budget 16384 --steps 60 --lr 6e-4 --only-packed --lm-head "$head")
  "$py" "$here/bench/train_h200.py" "${common[@]}" --grad-accum 2 --tag ref1 > "$out/ref1.log" 2>&1
  for run in "dp2 --grad-accum 1" "tp2 --tp 2 --grad-accum 2" "cp2 --cp 2 --grad-accum 2"; do
    set -- $run
    local tag=$1; shift
    torchrun --nproc-per-node 2 "$here/bench/train_h200.py" "${common[@]}" "$@" --tag "$tag" \
      > "$out/$tag.log" 2>&1 || echo "$tag failed (see $tag.log)"
  done
}

case ${1:-} in
  parity) shift; parity "$1" "${2:-cuda}" ;;
  throughput) shift; throughput "$1" "${2:-}" ;;
  fit) shift; fit "$1" "$2" ;;
  "") sed -n 2,13p "$0"; exit 2 ;;
  *) curves "$@" ;;
esac
