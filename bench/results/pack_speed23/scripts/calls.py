"""Python-level call counts (all threads) of the plan+write phase of one pack() (fresh cache).
usage: PYTHONPATH=TREE python calls.py N WORK OUT.json"""
import os, sys, json, shutil, threading, collections
N, WORK, OUTJ = int(sys.argv[1]), sys.argv[2], sys.argv[3]
import packtool.packing as P
from packtool.align import Alignment
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig
sys.path.insert(0, os.environ["PYTHONPATH"])
from bench.pack_e2e import _make_input
os.makedirs(WORK, exist_ok=True)
src = _make_input(N, os.path.dirname(WORK.rstrip("/")))
counts = collections.Counter()
root = os.environ["PYTHONPATH"]
def prof(frame, event, arg):
    if event == "call":
        f = frame.f_code.co_filename
        counts[(f.replace(root, "T"), frame.f_code.co_name)] += 1
    elif event == "c_call":
        counts[("C", getattr(arg, "__qualname__", str(arg)))] += 1
orig = P.tokenize_to_cache
def wrapped(*a, **k):
    r = orig(*a, **k)
    threading.setprofile(prof); sys.setprofile(prof)
    return r
P.tokenize_to_cache = wrapped
args = (Alignment(capacity=8192), PackingConfig("bfd", overflow="split"), TokenizeConfig(shape="tokens"))
out, cache = os.path.join(WORK, "out"), os.path.join(WORK, "cache")
shutil.rmtree(out, ignore_errors=True); shutil.rmtree(cache, ignore_errors=True)
r = P.pack([src], *args, out, cache_dir=cache)
sys.setprofile(None); threading.setprofile(None)
json.dump([[a, b, c] for (a, b), c in counts.items()], open(OUTJ, "w"))
shutil.rmtree(out, ignore_errors=True); shutil.rmtree(cache, ignore_errors=True)
