#!/bin/bash
# raw chat A/B on the device host: main with packtool's jemalloc settings against main with
# dirty_decay_ms:0, NS streams of 2 pinned cores, invocations of --repeat 4 until LIMIT
ln -sfn $PWD/.carry/shared ../shared
D="background_thread:true,max_background_threads:1,dirty_decay_ms:100,muzzy_decay_ms:0"
Z="${D/dirty_decay_ms:100/dirty_decay_ms:0}"
NS=${NS:-7}; LIMIT=${LIMIT:-500}
export OMP_NUM_THREADS=2 NUMBA_NUM_THREADS=2
python3 bench/chat_memory.py --data real --tok gpt2 --rows 2000 > /dev/null 2>&1
uptime > $OUT/uptime.txt
stream() {
  i=$1; c0=$((2+2*i)); c1=$((3+2*i))
  while true; do
    taskset -c $c0,$c1 python3 bench/pack_before_after.py --before . --after . --chat-rows ${ROWS:-20000} --repeat 4 \
      --env "before:JE_ARROW_MALLOC_CONF=$D" --env "after:JE_ARROW_MALLOC_CONF=$Z" --work /tmp/ab$i --log $OUT/ab$i.jsonl >> $OUT/ab$i.log 2>&1
  done
}
for i in $(seq 0 $((NS-1))); do stream $i & done
sleep $LIMIT; uptime >> $OUT/uptime.txt
pkill -f pack_before_after.py; pkill -f packtool; sleep 1
cat $OUT/ab*.jsonl > $OUT/all.jsonl; wc -l $OUT/all.jsonl; tail -4 $OUT/ab0.log
