#!/bin/bash
# class-8 allocator configs on the device host: NS streams, 2 pinned cores each, configs rotated
ln -sfn $PWD/.carry/shared ../shared
D="background_thread:true,max_background_threads:1,dirty_decay_ms:100,muzzy_decay_ms:0"
CFG=("default" "$D,narenas:1" "background_thread:true,max_background_threads:1,dirty_decay_ms:0,muzzy_decay_ms:0" "background_thread:false,dirty_decay_ms:100,muzzy_decay_ms:0")
NS=${NS:-7}; LIMIT=${LIMIT:-520}
export OMP_NUM_THREADS=2 NUMBA_NUM_THREADS=2
python3 bench/chat_memory.py --data real --tok gpt2 --rows 2000 --log $OUT/warm.jsonl > /dev/null 2>&1
uptime > $OUT/uptime.txt
stream() {
  i=$1; c0=$((2+2*i)); c1=$((3+2*i)); rep=0
  while true; do
    k=$(( (i + rep) % ${#CFG[@]} ))
    if [ $((rep % 2)) = 0 ]; then rows=20000,100000; else rows=100000,20000; fi
    env=(); [ "${CFG[$k]}" != default ] && env=(--env "JE_ARROW_MALLOC_CONF=${CFG[$k]}")
    taskset -c $c0,$c1 python3 bench/chat_memory.py --data real --tok gpt2 --rows $rows --stages --cli "${env[@]}" --log $OUT/s$i.jsonl >> $OUT/s$i.log 2>&1
    rep=$((rep+1))
  done
}
for i in $(seq 0 $((NS-1))); do stream $i & done
sleep $LIMIT; uptime >> $OUT/uptime.txt
pkill -f chat_memory.py; pkill -f "packtool"; sleep 1
cat $OUT/s*.jsonl > $OUT/all.jsonl; wc -l $OUT/all.jsonl
