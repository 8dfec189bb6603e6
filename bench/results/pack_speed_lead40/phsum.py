"""Per-phase pairs of phase.py results (JSON Lines): median after - before per phase, a bootstrap 90% interval, the
median ratio. python phsum.py FILE.jsonl"""
import json, sys, statistics as st, random
random.seed(0)
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    by.setdefault((r["stream"], r["k"]), {})["b" if "before" in r["tree"] else "a"] = r
pairs = [p for p in by.values() if len(p) == 2]
print("pairs", len(pairs))
def q(xs):
    xs = sorted(xs); m = st.median(xs)
    bs = sorted(st.median(random.choices(xs, k=len(xs))) for _ in range(1000))
    return m, bs[50], bs[950]
keys = ["wall", "cpu"] + sorted({k for p in pairs for k in p["a"]["phases"]} | {k for p in pairs for k in p["b"]["phases"]})
for k in keys:
    def g(r, i):
        return r[k] if k in ("wall", "cpu") else r["phases"].get(k, [0, 0, 0])[i]
    for i, lab in ((0, "cpu"), (1, "wall")) if k not in ("wall", "cpu") else ((0, ""),):
        b = [g(p["b"], i) for p in pairs]; a = [g(p["a"], i) for p in pairs]
        d = [x - y for x, y in zip(a, b)]
        rat = [x / y for x, y in zip(a, b) if y > 0]
        m, lo, hi = q(d)
        print(f"{k:18s} {lab:4s} before {st.median(b):7.3f} after {st.median(a):7.3f}  diff {m:+.3f} ({lo:+.3f}..{hi:+.3f})" + (f"  ratio {st.median(rat):.3f}" if rat else ""))
