import sys, os, json, statistics
sys.path.insert(0, "/work/main/bench")
from pack_before_after import one_chat
rounds = int(sys.argv[1]); trees = sys.argv[2:]
data = "/work/bis/chat_20000.jsonl"
for t in trees:
    one_chat(t, data, "/work/bis/w_multi")
res = {t: [] for t in trees}
for r in range(rounds):
    order = trees[r % len(trees):] + trees[:r % len(trees)]
    if r % 2: order = order[::-1]
    for t in order:
        x = one_chat(t, data, "/work/bis/w_multi"); res[t].append(x)
        print(r, os.path.basename(t), f"{x['seconds']:.2f} {x['cpu_seconds']:.2f} load {os.getloadavg()[0]:.2f}", flush=True)
base = trees[0]
for t in trees:
    w = [a["seconds"] / b["seconds"] for a, b in zip(res[t], res[base])]
    c = [a["cpu_seconds"] / b["cpu_seconds"] for a, b in zip(res[t], res[base])]
    print(f"{os.path.basename(t):14s} wall med {statistics.median(x['seconds'] for x in res[t]):.2f} ratio {statistics.median(w):.3f} cpu ratio {statistics.median(c):.3f}")
json.dump(res, open("/work/bis/multi_%d.json" % os.getpid(), "w"))
