#!/bin/bash
cd /work/main
PY=/work/main/.venv/bin/python
R=/work/m40
git -C /work/wt-after checkout -q --detach main
git -C /work/wt-after log --oneline -1 > $R/after_commit.txt
uptime > $R/load0.txt
$PY bench/pack_before_after.py --before /work/wt-before2 --after /work/wt-after --n 1000000 --repeat 16 --work /work/abwork40 --log $R/ab_pretok.jsonl > $R/ab_pretok.log 2>&1
uptime >> $R/load0.txt
$PY bench/read_check.py --runs 5 --times 3 --work /work/rc40 > $R/read_check.txt 2>&1
uptime >> $R/load0.txt
$PY bench/pack_before_after.py --before /work/wt-before2 --after /work/wt-after --chat-rows 20000 --repeat 8 --work /work/abwork40c --log $R/ab_chat.jsonl > $R/ab_chat.log 2>&1
uptime >> $R/load0.txt
$PY bench/chat_memory.py --data real --tok gpt2 --rows 10000,20000,100000,300000 --log $R/chat_memory.jsonl > $R/chat_memory.txt 2>&1
uptime >> $R/load0.txt
echo DONE > $R/DONE
