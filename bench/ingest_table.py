"""Markdown table of bench/pack_e2e_pretok.py --log JSON lines: median per (size, engine).

    python bench/ingest_table.py runs.jsonl
"""
import json
import statistics
import sys

runs = [json.loads(x) for x in open(sys.argv[1]) if x.strip()]
by = {}
for r in runs:
    by.setdefault(r["n"], {}).setdefault(r["engine"], []).append(r)
print("| sequences | engine | runs | wall s (median, range) | whole process s (median, range) | CPU s (median) | input tokens/s (wall) | "
      "tokens/CPU-s | peak RSS | RSS growth | bins over lower bound | tokens kept | load (1 min) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for n in sorted(by):
    for eng in ("packtool", "TRL"):
        rs = by[n].get(eng, [])
        if not rs:
            continue
        w = [r["seconds"] for r in rs]
        c = [r["cpu_seconds"] for r in rs]
        ps = [r["process_seconds"] for r in rs if "process_seconds" in r]
        proc = f"{statistics.median(ps):.1f} ({min(ps):.1f}-{max(ps):.1f})" if ps else "—"
        tok = rs[0]["input_tokens"]
        # each side against ceil(its own tokens / C): TRL truncates rows longer than C
        lb = rs[0].get("lower_bound") or -(-rs[0]["tokens"] // 8192)
        over = f"{100 * (rs[0]['bins'] - lb) / lb:+.3f}%"
        loads = "-".join(f"{r['load_before'][0]:.0f}" for r in rs)
        print(f"| {n:,} | {eng} | {len(rs)} | {statistics.median(w):.1f} ({min(w):.1f}-{max(w):.1f}) | "
              f"{proc} | {statistics.median(c):.1f} | {tok / statistics.median(w) / 1e6:.2f}M | "
              f"{tok / statistics.median(c) / 1e6:.2f}M | {max(r['peak_rss'] for r in rs) / 2**20:,.0f} MiB | "
              f"{max(r['rss_growth'] for r in rs) / 2**20:,.0f} MiB | {over} | "
              f"{100 * rs[0].get('tokens', tok) / tok:.1f}% | {loads} |")

# pairwise ratios (each packtool run against the TRL run that followed it)
for n in sorted(by):
    p, t = by[n].get("packtool", []), by[n].get("TRL", [])
    if p and t:
        pairs = [b["seconds"] / a["seconds"] for a, b in zip(p, t)]
        line = f"{n:,}: TRL/packtool wall per pair " + ", ".join(f"{x:.2f}x" for x in pairs)
        procs = [b["process_seconds"] / a["process_seconds"] for a, b in zip(p, t) if "process_seconds" in a]
        if procs:
            line += "; whole process " + ", ".join(f"{x:.2f}x" for x in procs)
        print(line)
