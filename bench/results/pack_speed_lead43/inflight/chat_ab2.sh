#!/bin/bash
# raw chat: wall A/B of b (7585977) / a (main) / if3 (main, 3 encode chunks in flight) on 20k rows in NW streams,
# and peak RSS of a vs if3 on 100k rows in 2 streams; every stream 2 pinned cores
ln -sfn $PWD/.carry/shared ../shared
NW=${NW:-5}; LIMIT=${LIMIT:-400}
export OMP_NUM_THREADS=2 NUMBA_NUM_THREADS=2 PYTHONPATH=$PWD/.carry/s40/site
lscpu -e > $OUT/lscpu.txt 2>&1; nproc >> $OUT/lscpu.txt
mkdir -p /tmp/in; rm -f /tmp/stop43
python3 -c "import sys; sys.path.insert(0,'bench'); from chat_memory import REAL_CHATS, make_data; make_data('/tmp/in/chat.jsonl', 20000, REAL_CHATS); make_data('/tmp/in/big.jsonl', 100000, REAL_CHATS); make_data('/tmp/in/warm.jsonl', 200, REAL_CHATS)" || exit 1
for v in b a; do t=.; [ $v = b ] && t=.carry/before; taskset -c 2,3 python3 .carry/s42/one.py $t $v /tmp/in/warm.jsonl /tmp/in/ww || exit 1; done
uptime > $OUT/uptime.txt
stream() {  # i data variants...
  i=$1; data=$2; shift 2; vars=("$@"); c0=$((2+2*i)); c1=$((3+2*i)); k=0
  while [ ! -e /tmp/stop43 ]; do
    v=${vars[$(( (k + i) % ${#vars[@]} ))]}; t=.; [ $v = b ] && t=.carry/before
    taskset -c $c0,$c1 python3 .carry/s42/one.py $t $v $data /tmp/in/w$i 2>>/tmp/err$i.log | grep RESULT | sed "s/^RESULT //; s/}\$/, \"stream\": $i, \"k\": $k, \"data\": \"$(basename $data)\"}/" >> $OUT/ph$i.jsonl
    k=$((k+1))
  done
}
stream 0 /tmp/in/big.jsonl a if3 &
stream 1 /tmp/in/big.jsonl a if3 &
for i in $(seq 2 $((NW+1))); do stream $i /tmp/in/chat.jsonl b a if3 & done
sleep $LIMIT; uptime >> $OUT/uptime.txt
touch /tmp/stop43; wait
cat $OUT/ph*.jsonl > $OUT/all.jsonl; rm $OUT/ph*.jsonl; wc -l $OUT/all.jsonl; tail -3 /tmp/err0.log /tmp/err2.log
