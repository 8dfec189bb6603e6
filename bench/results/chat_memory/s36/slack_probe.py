"""python slack.py ROWS SLACK_MIB RUNS: `packtool pack` (as chat_memory runs it) in a child with tokenize's HeapBound slack set."""
import os, subprocess, sys, json, resource, shutil
sys.path.insert(0, "/work/main/bench")
import chat_memory as cm
rows, runs = int(sys.argv[1]), int(sys.argv[3])
slacks = [int(x) for x in sys.argv[2].split(",")]
work = f"/work/scratch-lead/s36/slack/w{rows}"
os.makedirs(work, exist_ok=True)
data = os.path.join(work, "in.jsonl")
if not os.path.exists(data):
    cm.make_data(data, rows, cm.REAL_CHATS)
tok = "/work/shared/data/tokenizers/gpt2/tokenizer.json"
code = ("import sys, packtool.tokenize.pipeline as p; p._HEAP_SLACK = int(sys.argv.pop(1)) << 20; "
        "from packtool.cli import main; sys.argv[0] = 'packtool'; main()")
for r in range(runs):
    for s in (slacks if r % 2 == 0 else slacks[::-1]):
        shutil.rmtree(os.path.join(work, "cache"), ignore_errors=True); shutil.rmtree(os.path.join(work, "out"), ignore_errors=True)
        cmd = [sys.executable, "-P", "-c", code, str(s), "pack", data, "--tokenizer", tok, "--chat-template", "chatml", "-C", "4096",
               "--overflow", "split", "--cache-dir", os.path.join(work, "cache"), "-o", os.path.join(work, "out"), "--no-progress"]
        p = subprocess.Popen(cmd, cwd="/work/main", env={**os.environ, "PYTHONPATH": "/work/main"}, stdout=subprocess.DEVNULL)
        _, st, ru = os.wait4(p.pid, 0)
        print(json.dumps({"rows": rows, "slack_mib": s, "run": r, "rc": st, "max_rss_mib": round(ru.ru_maxrss / 1024, 1),
                          "cpu_s": round(ru.ru_utime + ru.ru_stime, 2), "minflt": ru.ru_minflt, "load": os.getloadavg()[0]}), flush=True)
