#!/bin/bash
# pre-tokenized per-phase A/B on the device host: .carry/before (7585977) against this tree,
# NS streams of 2 pinned cores, alternating trees, until LIMIT seconds
ln -sfn $PWD/.carry/shared ../shared
NS=${NS:-7}; LIMIT=${LIMIT:-400}; N=${N:-1000000}
export OMP_NUM_THREADS=2 NUMBA_NUM_THREADS=2 PYTHONPATH=$PWD/.carry/s40/site
mkdir -p /tmp/in; rm -f /tmp/stop40
python3 -c "import sys; sys.path.insert(0,'.'); from bench.pack_e2e import _make_input; _make_input($N, '/tmp/in')"
for t in .carry/before .; do taskset -c 2,3 python3 .carry/s40/phase.py $t 2000 /tmp/in/warm > /dev/null 2>&1; done
uptime > $OUT/uptime.txt
stream() {
  i=$1; c0=$((2+2*i)); c1=$((3+2*i)); k=0
  while [ ! -e /tmp/stop40 ]; do
    if [ $(( (k + i) % 2 )) = 0 ]; then order=".carry/before ."; else order=". .carry/before"; fi
    for t in $order; do
      taskset -c $c0,$c1 python3 .carry/s40/phase.py $t $N /tmp/in/s$i 2>>/tmp/err$i.log | grep RESULT | sed "s/^RESULT //; s/}\$/, \"stream\": $i, \"k\": $k}/" >> $OUT/ph$i.jsonl
    done
    k=$((k+1))
  done
}
pids=""
for i in $(seq 0 $((NS-1))); do stream $i & pids="$pids $!"; done
sleep $LIMIT; uptime >> $OUT/uptime.txt
touch /tmp/stop40; pkill -f phase.py; wait
cat $OUT/ph*.jsonl > $OUT/all.jsonl; rm $OUT/ph*.jsonl; wc -l $OUT/all.jsonl; tail -3 /tmp/err0.log
