#!/bin/bash
# A stop's closing measurements, one after another on a quiet machine: the pre-tokenized and raw chat
# A/Bs against an older tree, the consumer checks' cost, the class-8 peak RSS series.
#   bash bench/final_ab.sh RESULTS WORK [BEFORE] [AFTER]
# RESULTS gets the logs and load readings, WORK the scratch folders; BEFORE (default /work/wt-before2:
# 7585977's packtool with today's bench/) and AFTER (default /work/wt-after, checked out at main).
set -e
R=${1:?results folder}; W=${2:?work folder}; B=${3:-/work/wt-before2}; A=${4:-/work/wt-after}
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
mkdir -p "$R" "$W"
[ "$A" = /work/wt-after ] && git -C "$A" checkout -q --detach main
git -C "$A" log --oneline -1 > "$R/after_commit.txt"
uptime > "$R/load0.txt"
$PY bench/pack_before_after.py --before "$B" --after "$A" --n 1000000 --repeat 16 --work "$W/pretok" --log "$R/ab_pretok.jsonl" > "$R/ab_pretok.log" 2>&1
uptime >> "$R/load0.txt"
$PY bench/read_check.py --runs 5 --times 3 --work "$W/rc" > "$R/read_check.txt" 2>&1
uptime >> "$R/load0.txt"
$PY bench/pack_before_after.py --before "$B" --after "$A" --chat-rows 20000 --repeat 8 --work "$W/chat" --log "$R/ab_chat.jsonl" > "$R/ab_chat.log" 2>&1
uptime >> "$R/load0.txt"
$PY bench/chat_memory.py --data real --tok gpt2 --rows 10000,20000,100000,300000 --log "$R/chat_memory.jsonl" > "$R/chat_memory.txt" 2>&1
uptime >> "$R/load0.txt"
