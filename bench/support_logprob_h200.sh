#!/bin/bash
# The H200 runs behind BENCHMARKS.md "Sample-support scoring" (issue 22), one device call each,
# from the repository root; logs and json go to OUT (the device's $OUT), named TAG_*:
#   bash bench/support_logprob_h200.sh bench OUT TAG   support GPU tests, accuracy, main table
#                                                     (K 2-512 all methods, 2048/4096 rule points),
#                                                     forward sweep at K 2048/4096 interleaved
#   bash bench/support_logprob_h200.sh suite OUT TAG   the GPU suite: support, online, hf, megatron
#   bash bench/support_logprob_h200.sh fix OUT TAG     the files that failed in suite, det dW launch variants
#   bash bench/support_logprob_h200.sh gap OUT TAG     support GPU tests, bench/support_fwd_gap.py, then
#                                                     what `bench` runs after its tests
#   bash bench/support_logprob_h200.sh fwdbwd OUT TAG  the fwd+bwd sweep (one round)
#   bash bench/support_logprob_h200.sh fwd OUT TAG     support GPU tests, the forward sweep at K
#                                                     2048/4096 interleaved, then bench/support_fwd_gap.py
# megatron-core travels as source in .carry/site (carry it).
set -u
part=$1 out=$2 tag=$3
export PYTHONPATH=$PWD:$PWD/.carry/site PYTHONUNBUFFERED=1
env_log() {
  { date -u; uptime; nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv
    python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'; } >> "$out/${tag}_env.txt" 2>&1
}
env_log
if [ "$part" = bench ] || [ "$part" = gap ] || [ "$part" = fwd ]; then
  timeout 150 python3 -m pytest -q -x -rs -s tests/kernels/test_support_logprob_gpu.py > "$out/${tag}_gpu_tests.log" 2>&1 \
    || { echo "support GPU tests failed"; tail -40 "$out/${tag}_gpu_tests.log"; exit 1; }
  tail -3 "$out/${tag}_gpu_tests.log"; env_log
fi
if [ "$part" = gap ]; then
  timeout 120 python3 bench/support_fwd_gap.py --out "$out/${tag}_fwd_gap.json" > "$out/${tag}_fwd_gap.log" 2>&1
  echo "gap rc $?"; grep '^{' "$out/${tag}_fwd_gap.log"; env_log
fi
if [ "$part" = bench ] || [ "$part" = gap ]; then
  timeout 240 python3 bench/support_logprob.py --parts ab,acc,main --ks 2,20,64,512 --rule-ks 2048,4096 \
    --methods auto,gather,gather_det,dense,torch_gather,full_fused --rounds 3 --reps 5 \
    --out "$out/${tag}_main.json" > "$out/${tag}_main.log" 2>&1; echo "main rc $?"; env_log
  timeout 300 python3 bench/support_logprob.py --parts sweep --reps 6 --sweep-ks 2048,4096 --sweep-modes fwd \
    --sweep-rounds 3 --out "$out/${tag}_sweep_fwd.json" > "$out/${tag}_sweep_fwd.log" 2>&1; echo "sweep rc $?"; env_log
elif [ "$part" = fwdbwd ]; then
  timeout 300 python3 bench/support_logprob.py --parts sweep --reps 4 --sweep-modes fwdbwd \
    --out "$out/${tag}_sweep_fwdbwd.json" > "$out/${tag}_sweep_fwdbwd.log" 2>&1; echo "fwdbwd rc $?"; env_log
fi
if [ "$part" = fwd ]; then
  timeout 200 python3 bench/support_logprob.py --parts sweep --reps 6 --sweep-ks 2048,4096 --sweep-modes fwd \
    --sweep-rounds 3 --out "$out/${tag}_sweep_fwd.json" > "$out/${tag}_sweep_fwd.log" 2>&1; echo "sweep rc $?"; env_log
  timeout 60 python3 bench/support_fwd_gap.py --out "$out/${tag}_fwd_gap.json" > "$out/${tag}_fwd_gap.log" 2>&1
  echo "gap rc $?"; grep '^{' "$out/${tag}_fwd_gap.log"; env_log
fi
if [ "$part" = suite ]; then
  timeout 560 python3 -m pytest -q -rs tests/kernels/test_support_logprob_gpu.py tests/online tests/hf tests/megatron \
    > "$out/${tag}_suite.log" 2>&1; echo "suite rc $?"; tail -30 "$out/${tag}_suite.log"; env_log
fi
if [ "$part" = fix ]; then  # the files that failed in the first suite call, and the det launch variants
  timeout 300 python3 -m pytest -q -rs tests/kernels/test_support_logprob_gpu.py tests/megatron/test_megatron_parity_cpu.py \
    tests/megatron/test_megatron_lm_head.py tests/hf/test_hf_collator.py > "$out/${tag}_suite_fix.log" 2>&1
  echo "suite fix rc $?"; tail -12 "$out/${tag}_suite_fix.log"; env_log
  timeout 200 python3 bench/support_det_profile.py --parts det --ks 64,512 --rounds 3 --reps 5 \
    --variants s4_h512_w4_m32,s4_h1024_w4_m32,s4_h1024_w8_m32,s4_h2048_w8_m32,s8_h1024_w8_m32 \
    --out "$out/${tag}_det_profile.json" > "$out/${tag}_det_profile.log" 2>&1; echo "det rc $?"; env_log
fi
