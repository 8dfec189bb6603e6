"""Figures of an inspect report as plain strings: shared by the terminal and HTML reports."""
from __future__ import annotations

from packtool.planning.summary import overflow_text

_BLOCKS = " ▏▎▍▌▋▊▉█"


def bar(x: float, top: float, width: int = 30) -> str:
    """A unicode block bar of x/top of `width` cells, eighths included."""
    if top <= 0 or x <= 0:
        return ""
    eighths = int(round(8 * width * min(x / top, 1.0)))
    return "█" * (eighths // 8) + (_BLOCKS[eighths % 8] if eighths % 8 else "")


def fmt_int(x) -> str:
    return "?" if x is None else f"{int(x):,}"  # None: a figure not known (an older plan file's)


def fmt_pct(x: float) -> str:
    return f"{100.0 * x:.2f}%"


def inspect_figures(r) -> list[tuple[str, str, str]]:
    pad, o, cap = r.padding, r.overflow, r.capacity_tokens
    bound = max(r.lower_bound, r.l2_bound)
    rows = [
        ("sequences", fmt_int(r.sequences), ""),
        ("segments", fmt_int(r.segments), "after the overflow policy"),
        ("slabs", fmt_int(r.slabs), f"{fmt_int(pad.singleton_slabs)} singleton(s)"),
        ("lower bound / L2", f"{fmt_int(r.lower_bound)} / {fmt_int(r.l2_bound)}",
         f"+{fmt_int(r.excess_over_bound)} slabs ({fmt_pct(r.excess_over_bound / bound) if bound else '-'})"),
        ("real tokens", fmt_int(r.real_tokens), _share(r.real_tokens, cap)),
    ]
    if r.loss_tokens is not None:
        rows.append(("loss tokens", fmt_int(r.loss_tokens), _share(r.loss_tokens, r.real_tokens) + " of real"))
    rows += [
        ("layout gaps (per sequence, CP)", fmt_int(pad.layout_pad), _share(pad.layout_pad, cap)),
        ("tail pads (per slab, TP/SP/FP8)", fmt_int(pad.tail_pad), _share(pad.tail_pad, cap)),
        ("fixed-length fill", fmt_int(pad.fill_pad), _share(pad.fill_pad, cap)),
        ("unused capacity (slack)", fmt_int(pad.slack), _share(pad.slack, cap)),
        ("physical tokens", fmt_int(r.physical_tokens), _share(r.physical_tokens, cap)),
        ("efficiency (real / physical)", fmt_pct(r.efficiency), ""),
        ("waste (padding + slack)", fmt_pct(r.waste), f"of {fmt_int(cap)} capacity tokens"),
        (f"overflow ({o.policy})", f"{fmt_int(o.sequences)} sequences",
         overflow_text(o, r.loss_counted, fmt_int)),
        (f"dp={r.dp.dp} imbalance", f"{fmt_pct(r.dp.compute_imbalance)} compute",
         f"{fmt_pct(r.dp.token_imbalance)} tokens · {fmt_pct(r.dp.step_imbalance)} per step"),
    ]
    return rows


def _share(x: int, total: int) -> str:
    return fmt_pct(x / total) if total else "-"


def what_if_line(r) -> str | None:
    w = r.what_if
    if w is None:
        return None
    change = (w.best - w.current) / w.current
    return (f"what if: {w.flag} {w.best:,} ({change:+.1%}) instead of {w.current:,} would cut padding "
            f"and unused capacity from {fmt_pct(w.current_waste)} to {fmt_pct(w.waste)} "
            f"({w.slabs:,} slabs instead of {w.current_slabs:,}; tried {', '.join(f'{c:,}' for c in w.tried)})")


def histogram_rows(h, integer_edges: bool) -> list[tuple[str, str, str]]:
    top = max(h.counts) if h.counts else 0
    out = []
    for i, c in enumerate(h.counts):
        lo, hi = h.edges[i], h.edges[i + 1]
        label = f"[{int(lo):,}, {int(hi):,})" if integer_edges else f"{lo:.0%}–{hi:.0%}"
        out.append((label, fmt_int(c), bar(c, top)))
    return out
