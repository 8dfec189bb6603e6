import re, sys, collections
def phases(path):
    ph, cnt = "pre", collections.defaultdict(collections.Counter)
    files = collections.defaultdict(collections.Counter)
    for line in open(path):
        m = re.match(r"\d+\s+(\w+)\(", line)
        if "speed23-MARK-" in line:
            ph = line.split("speed23-MARK-")[1].split('"')[0]
            continue
        if not m: continue
        name = m.group(1)
        cnt[ph][name] += 1
        if name in ("openat", "fsync", "fdatasync", "unlink", "rename", "renameat2", "link", "linkat", "mkdir", "newfstatat", "statx", "lstat", "stat", "fstat", "unlinkat", "rmdir", "getdents64", "flock", "fcntl"):
            fm = re.search(r'"([^"]*)"', line)
            files[ph][(name, re.sub(r"\d+", "N", fm.group(1)) if fm else "-")] += 1
    return cnt, files
a, fa = phases(sys.argv[1]); b, fb = phases(sys.argv[2])
ph = sys.argv[3] if len(sys.argv) > 3 else "ingested"
keys = sorted(set(a[ph]) | set(b[ph]), key=lambda k: -(a[ph][k] + b[ph][k]))
print(f"phase {ph}: total before {sum(a[ph].values())} after {sum(b[ph].values())}")
for k in keys:
    if a[ph][k] != b[ph][k] or a[ph][k] > 50:
        print(f"{k:20s} {a[ph][k]:8d} {b[ph][k]:8d}")
print("--- per path (differences)")
keys = sorted(set(fa[ph]) | set(fb[ph]), key=lambda k: -(fa[ph][k] + fb[ph][k]))
for k in keys:
    if fa[ph][k] != fb[ph][k]:
        print(f"{str(k):90s} {fa[ph][k]:6d} {fb[ph][k]:6d}")
