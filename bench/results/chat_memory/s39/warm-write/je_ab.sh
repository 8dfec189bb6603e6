#!/bin/bash
# Warm-cache write A/B over jemalloc settings: `je_ab.sh LOG REPS SETTING...` (each SETTING appended to
# packtool's, "" for packtool's own), rows 20k and 100k, settings rotated each rep. Runs were:
#   je_ab.sh oversize_decay0.jsonl 3 "" ",oversize_threshold:2097152" ",oversize_threshold:8388608" "DECAY0"
#   je_ab.sh decay_5_20_50_100.jsonl 3 "" "DECAY50" "DECAY20" "DECAY5"
#   je_ab.sh decay0_thp.jsonl 2 "" "DECAY0" "DECAY0,thp:always" ",thp:always"
# (DECAYn: packtool's setting with dirty_decay_ms:n)
cd /work/main/bench/results/chat_memory/s38/loaded/scripts
LOG=$1; REPS=$2; shift 2
D="background_thread:true,max_background_threads:1,dirty_decay_ms:100,muzzy_decay_ms:0"
CFG=()
for s in "$@"; do
  case $s in DECAY*) n=${s#DECAY}; n=${n%%,*}; rest=${s#DECAY$n}; CFG+=("${D/dirty_decay_ms:100/dirty_decay_ms:$n}$rest");; *) CFG+=("$D$s");; esac
done
for rep in $(seq 0 $((REPS - 1))); do
 for r in 20000 100000; do
  for i in "${!CFG[@]}"; do
   k=$(( (i + rep) % ${#CFG[@]} ))
   JE_ARROW_MALLOC_CONF="${CFG[$k]}" timeout 300 /work/main/.venv/bin/python stage_peaks.py $r /work/m39/cache /work/wt-lead 2>/dev/null | tail -1 >> "$LOG"
  done
 done
done
