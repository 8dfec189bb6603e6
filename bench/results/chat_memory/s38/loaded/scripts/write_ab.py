"""Warm-cache A/B of the write stage of a raw chat pack (s38 writers, loaded box).

    python write_ab.py ROWS PAIRS LOG TREE_A TREE_B

Tokenizes ROWS distinct Taskmaster chats (bench/chat_memory.py --data real's input, gpt2 +
chatml, -C 4096, --overflow split) once into a cache with TREE_A, then runs the same
`python -P -m packtool pack` command from that warm cache (plan + write only) alternately
with TREE_A and TREE_B (order swapped every pair). Each run's ru_maxrss (wait4), CPU and wall
are one JSON line in LOG, with the load average."""
import json, os, shutil, subprocess, sys, tempfile, time
BENCH = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), *[".."] * 5))
sys.path.insert(0, BENCH)
import chat_memory as cm

rows, pairs, log, trees = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4:6]
work = tempfile.mkdtemp(prefix="write-ab-")
data, cache = os.path.join(work, "in.jsonl"), os.path.join(work, "cache")
cm.make_data(data, rows, cm.REAL_CHATS)
tok = os.path.join(cm.SHARED, "tokenizers", "gpt2", "tokenizer.json")


def run(tree, label):
    out = os.path.join(work, "out")
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=tree, PACKTOOL_TURN_STATS="1")
    env.pop("ARROW_DEFAULT_MEMORY_POOL", None)
    load = os.getloadavg()[0]
    t0 = time.time()
    p = subprocess.Popen([sys.executable, "-P", "-m", "packtool", "pack", data, "--tokenizer", tok, "--chat-template",
                          "chatml", "-C", "4096", "--overflow", "split", "--cache-dir", cache, "-o", out,
                          "--no-progress"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    assert status == 0, err[-2000:]
    turn = [l for l in err.splitlines() if l.startswith("encode-turn")]
    r = {"rows": rows, "label": label, "tree": tree, "max_rss_mib": round(ru.ru_maxrss / 1024, 1),
         "cpu_s": round(ru.ru_utime + ru.ru_stime, 2), "wall_s": round(time.time() - t0, 2),
         "minflt": ru.ru_minflt, "turn": turn[-1] if turn else None, "load_1min": round(load, 1),
         "load_after": round(os.getloadavg()[0], 1), "utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
         "labelled": "loaded"}
    print(json.dumps(r), flush=True)
    with open(log, "a") as f:
        f.write(json.dumps(r) + "\n")


try:
    run(trees[0], "warm-up (tokenize, not compared)")
    for i in range(pairs):
        order = [("A", trees[0]), ("B", trees[1])]
        for label, tree in (order if i % 2 == 0 else order[::-1]):
            run(tree, label)
finally:
    shutil.rmtree(work, ignore_errors=True)
