"""python one.py TREE VARIANT DATA WORK -> RESULT json line: a raw chat pack (bench/pack_before_after.py's
one_chat command) through launch.py, wall / CPU / peak RSS of the child."""
import json, os, shutil, subprocess, sys, time
tree, variant, data, work = sys.argv[1:5]
tree = os.path.abspath(tree)
shared = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "shared", "data"))
shutil.rmtree(work, ignore_errors=True)
cmd = [sys.executable, "-P", os.path.join(os.path.dirname(os.path.abspath(__file__)), "launch.py"), tree, variant,
       "pack", data, "--tokenizer", os.path.join(shared, "tokenizers", "gpt2", "tokenizer.json"), "--chat-template",
       "chatml", "-C", "4096", "--overflow", "split", "--cache-dir", os.path.join(work, "cache"), "-o",
       os.path.join(work, "out"), "--no-progress"]
t0 = time.perf_counter()
p = subprocess.Popen(cmd, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
err = p.stderr.read()
_, status, ru = os.wait4(p.pid, 0)
wall = time.perf_counter() - t0
if os.waitstatus_to_exitcode(status):
    sys.exit(f"{tree} {variant}: failed\n{err.decode(errors='replace')[-2000:]}")
shutil.rmtree(work, ignore_errors=True)
print("RESULT " + json.dumps({"tree": tree, "variant": variant, "wall": wall, "cpu": ru.ru_utime + ru.ru_stime,
                              "rss": ru.ru_maxrss / 1024, "minflt": ru.ru_minflt, "nivcsw": ru.ru_nivcsw,
                              "nvcsw": ru.ru_nvcsw}))
