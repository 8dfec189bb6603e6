"""put_in_order on N random-order routed records, process CPU, 7 runs: python put_in_order_micro.py TREE [N]"""
import sys, os, time, numpy as np, importlib
tree = sys.argv[1]; sys.path.insert(0, tree)
import packtool
from packtool.slabs import routed as R
n = int(sys.argv[2]) if len(sys.argv) > 2 else 125000
rng = np.random.default_rng(0)
rec = np.zeros(n, R.ROUTED)
rec["pos"] = rng.permutation(n); rec["source"] = rng.integers(0, 1e6, n); rec["start"] = rng.integers(0, 3e8, n)
rec["length"] = 300; rec["chunk"] = 0
p = "/tmp/pio.bin"
ts = []
for i in range(7):
    rec.tofile(p)
    c0 = time.process_time(); R.put_in_order(p, n); ts.append(time.process_time() - c0)
print(tree, n, "min %.4f med %.4f" % (min(ts), sorted(ts)[3]))
