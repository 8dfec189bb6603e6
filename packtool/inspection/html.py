"""`inspect --html FILE`: one self-contained page (inline SVG and CSS, no script, no network)
with the same figures as the terminal table (`report.inspect_figures`) and the same charts."""
from __future__ import annotations

from contextlib import contextmanager
from html import escape
from typing import Iterator

from packtool.inspection.figures import fmt_int, fmt_pct, histogram_rows, inspect_figures, what_if_line

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1180px;color:#1d2430;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dde2ea;padding-bottom:4px}
.sub{color:#5b6676;margin-bottom:14px}.whatif{background:#eef6ff;border-left:4px solid #2f6fde;padding:8px 12px;margin:14px 0}
table{border-collapse:collapse;margin:6px 0}td,th{padding:3px 10px;border-bottom:1px solid #edf0f4;text-align:right}
th{background:#f5f7fa;font-weight:600}td:first-child,th:first-child{text-align:left}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:18px}.legend span{display:inline-block;margin-right:14px}
.sw{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:5px;vertical-align:-1px}
svg text{font:11px system-ui,sans-serif;fill:#3a4454}.err{color:#b3261e}
"""
PARTS = (("real tokens", "real_tokens", "#2f6fde"), ("layout gaps", "layout_pad", "#f2a33a"),
         ("tail pads", "tail_pad", "#d9534f"), ("fixed-length fill", "fill_pad", "#8e6bbf"),
         ("unused capacity", "slack", "#b8c2cf"))


def _breakdown_svg(r, width: int = 1100) -> str:
    """One stacked bar of the capacity: real tokens, each kind of padding, slack."""
    pad = r.padding
    total = r.capacity_tokens or 1
    x, rects, legend = 0.0, [], []
    for label, key, color in PARTS:
        v = getattr(pad, key)
        w = width * v / total
        rects.append(f'<rect x="{x:.2f}" y="0" width="{w:.2f}" height="34" fill="{color}">'
                     f'<title>{escape(label)}: {fmt_int(v)} ({fmt_pct(v / total)})</title></rect>')
        legend.append(f'<span><i class="sw" style="background:{color}"></i>{escape(label)} '
                      f'{fmt_int(v)} ({fmt_pct(v / total)})</span>')
        x += w
    return (f'<svg width="{width}" height="36" viewBox="0 0 {width} 36" role="img" '
            f'aria-label="capacity breakdown">{"".join(rects)}</svg><div class="legend">{"".join(legend)}</div>')


def _bars_svg(rows: list[tuple[str, int]], title: str, color: str, width: int = 540) -> str:
    """Vertical bars with count labels; rows are (bin label, count)."""
    h, top_pad, bottom = 190, 18, 8 + 6 * max((len(lab) for lab, _ in rows), default=4)
    n = max(len(rows), 1)
    top = max((c for _, c in rows), default=0) or 1
    left = 40
    bw = (width - left - 8) / n
    out = [f'<svg width="{width}" height="{h + top_pad + bottom}" role="img" aria-label="{escape(title)}">',
           f'<line x1="{left - 2}" y1="{h + top_pad}" x2="{width - 5}" y2="{h + top_pad}" stroke="#9aa4b2"/>']
    for i, (label, c) in enumerate(rows):
        bh = h * c / top
        x = left + i * bw
        y = top_pad + h - bh
        out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(bw - 3, 1):.1f}" height="{bh:.1f}" fill="{color}">'
                   f'<title>{escape(label)}: {fmt_int(c)}</title></rect>')
        if c:
            out.append(f'<text x="{x + bw / 2:.1f}" y="{y - 4:.1f}" text-anchor="middle">{fmt_int(c)}</text>')
        out.append(f'<text x="{x + bw / 2:.1f}" y="{top_pad + h + 14}" text-anchor="end" '
                   f'transform="rotate(-35 {x + bw / 2:.1f} {top_pad + h + 14})">{escape(label)}</text>')
    out.append("</svg>")
    return "".join(out)


def _table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def render_html(r) -> str:
    a = r.alignment
    e = escape
    sub = (f"{e(r.kind)} {e(r.path or '')} · {e(r.packing['algorithm'])} · tp={a['tp']} cp={a['cp']} "
           f"sp={'on' if a['sp'] else 'off'} fp8={e(a['fp8'])} · C={fmt_int(a['capacity'])} U={fmt_int(a['usable'])}"
           + (f" fixed={fmt_int(a['fixed_length'])}" if a["fixed_length"] else "")
           + f" · s={a['s']} t={a['t']} · {e(a['convention'])} convention")
    parts = ["<!doctype html><html lang='en'><head><meta charset='utf-8'>",
             "<title>packtool inspect</title>", f"<style>{CSS}</style></head><body>",
             "<h1>packtool inspect</h1>", f"<div class='sub'>{sub}</div>"]
    line = what_if_line(r)
    if line:
        parts.append(f"<div class='whatif'>{e(line)}</div>")
    parts += ["<h2>Where the tokens went</h2>", _breakdown_svg(r),
              _table(["figure", "value", "share"], [[e(x) for x in row] for row in inspect_figures(r)])]
    fill = histogram_rows(r.fill_histogram, False)
    lens = histogram_rows(r.length_histogram, True)
    parts += ["<div class='grid'><div><h2>Slab fill (real tokens / U)</h2>",
              _bars_svg([(lab, int(c.replace(',', ''))) for lab, c, _ in fill], "slab fill", "#2f6fde"),
              _table(["bin", "slabs"], [[e(lab), c] for lab, c, _ in fill]),
              "</div><div><h2>Sequence lengths</h2>",
              _bars_svg([(lab, int(c.replace(',', ''))) for lab, c, _ in lens], "sequence lengths", "#3a9d7a"),
              _table(["bin (tokens)", "sequences"], [[e(lab), c] for lab, c, _ in lens]), "</div></div>"]
    d = r.dp
    parts += [f"<h2>Per DP rank (dp={d.dp})</h2>",
              f"<div class='sub'>imbalance: {fmt_pct(d.compute_imbalance)} compute · "
              f"{fmt_pct(d.token_imbalance)} tokens · {fmt_pct(d.step_imbalance)} per step</div>",
              _bars_svg([(f"rank {x.rank}", int(round(x.compute))) for x in d.ranks], "compute per rank", "#8e6bbf"),
              _table(["rank", "slabs", "real tokens", "physical tokens", "compute"],
                     [[str(x.rank), fmt_int(x.slabs), fmt_int(x.real_tokens), fmt_int(x.physical_tokens),
                       f"{x.compute:,.0f}"] for x in d.ranks])]
    parts += ["<h2>Worst slabs (padding + unused capacity)</h2>",
              _table(["slab", "where", "segments", "real", "physical", "layout", "tail", "fill", "slack", "fill %"],
                     [[str(w.slab), e(w.location), str(w.segments), fmt_int(w.real_tokens),
                       fmt_int(w.physical_tokens), fmt_int(w.layout_pad), fmt_int(w.tail_pad),
                       fmt_int(w.fill_pad), fmt_int(w.slack), fmt_pct(w.fill) + (" singleton" if w.singleton else "")]
                      for w in r.worst_slabs])]
    if r.side_columns:
        from packtool.inspection.side import SIDE_HEAD, side_rows
        parts += ["<h2>Side columns</h2>", _table(SIDE_HEAD, [[e(x) for x in row] for row in side_rows(r)])]
    if r.compare:
        ok = [c for c in r.compare if c.error is None]
        parts += ["<h2>Same lengths, other algorithms and conventions</h2>",
                  _bars_svg([(f"{c.convention}/{c.algorithm}", int(round(1e4 * c.waste))) for c in ok],
                            "waste in basis points", "#d9534f", width=1100),
                  "<div class='sub'>bars: waste (padding + unused capacity) in basis points</div>",
                  _table(["convention", "algorithm", "s", "t", "slabs", "bound", "efficiency", "waste"],
                         [[e(c.convention), e(c.algorithm), str(c.s), str(c.t), fmt_int(c.slabs),
                           fmt_int(max(c.lower_bound, c.l2_bound)), fmt_pct(c.efficiency), fmt_pct(c.waste)]
                          if c.error is None else
                          [e(c.convention), e(c.algorithm), "", "", "", "", "", f"<span class='err'>{e(c.error)}</span>"]
                          for c in r.compare])]
    parts.append(f"<p class='sub'>inspect took {r.seconds:.2f} s · JSON: <code>packtool inspect --json</code> "
                 f"(schema packtool-inspect v1, docs/INSPECT.md)</p></body></html>")
    return "\n".join(parts)


def check_html_path(path: str, overwrite: bool = False, inputs=()) -> str:
    """Refuse, before any work, a report path packtool must not write (packtool.output's rules:
    a link, a folder, an input, an existing file without `overwrite`) or that would land inside
    a packed output (every plain Parquet reader and `verify` would then take it for a shard).
    Returns the resolved path."""
    from packtool.output.files import check_new_file
    from packtool.output.paths import refuse_inside_packed
    p = check_new_file(path, "html", replace=overwrite, inputs=inputs)
    refuse_inside_packed(path, "html")  # as typed (the resolved path beside it)
    return p


@contextmanager
def holding_html_path(path: str, overwrite: bool = False, inputs=()) -> Iterator[str]:
    """`check_html_path`, the report held for the block (output.lock): a second run on the
    same path is refused rather than both writing it, the last one silently winning."""
    from packtool.output.lock import holding_file
    with holding_file(lambda: check_html_path(path, overwrite, inputs), path, "html", "inspect",
                      "report") as p:
        yield p


def write_html(r, path: str, overwrite: bool = False, inputs=()) -> None:
    from packtool.output.files import write_file
    with holding_html_path(path, overwrite, inputs), \
            write_file(path, "html", replace=overwrite, inputs=inputs, text=True) as f:
        f.write(render_html(r))
