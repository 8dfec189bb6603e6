#!/bin/bash
cd /work/main/bench/results/chat_memory/s38/loaded/scripts
D="background_thread:true,max_background_threads:1,dirty_decay_ms:100,muzzy_decay_ms:0"
CFG=("$D" "${D/dirty_decay_ms:100/dirty_decay_ms:0}" "${D/dirty_decay_ms:100/dirty_decay_ms:0},thp:always" "$D,thp:always")
for rep in 0 1; do
 for r in 20000 100000; do
  for i in 0 1 2 3; do
   k=$(( (i + rep) % 4 ))
   JE_ARROW_MALLOC_CONF="${CFG[$k]}" timeout 300 /work/main/.venv/bin/python stage_peaks.py $r /work/m39/cache /work/wt-lead 2>/dev/null | tail -1 >> ${LOG:-/work/m39/je_ab.jsonl}
  done
 done
done
