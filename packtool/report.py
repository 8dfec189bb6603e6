"""Plan summaries for people (rich tables) and programs (JSON): the figures `plan` prints."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .plan import OverflowStats, Plan
from .stats import PaddingStats, padding_stats


@dataclass(frozen=True)
class PlanSummary:
    alignment: dict
    packing: dict
    sequences: int
    segments: int
    slabs: int
    lower_bound: int
    l2_bound: int
    excess_over_bound: int
    padding: PaddingStats
    overflow: OverflowStats
    dp_imbalance: float
    dp_moved: int
    plan_seconds: float

    def to_dict(self) -> dict:
        return asdict(self)


def plan_summary(p: Plan) -> PlanSummary:
    a = p.alignment
    bound = max(p.lower_bound, p.l2_bound)
    return PlanSummary(
        alignment=dict(tp=a.tp, cp=a.cp, sp=a.sp, fp8=a.fp8, capacity=a.capacity,
                       fixed_length=a.fixed_length, convention=a.convention, s=a.s, t=a.t,
                       usable=a.usable),
        packing=asdict(p.packing), sequences=p.num_sequences, segments=int(p.seg_len.size),
        slabs=p.num_slabs, lower_bound=p.lower_bound, l2_bound=p.l2_bound,
        excess_over_bound=p.num_slabs - bound,
        padding=padding_stats(p.layout, a, p.singleton), overflow=p.overflow,
        dp_imbalance=p.dp_imbalance, dp_moved=p.dp_moved, plan_seconds=p.seconds)


def _pct(x: int, total: int) -> str:
    return f"{100.0 * x / total:.2f}%" if total else "-"


def print_plan_summary(s: PlanSummary, console: Console) -> None:
    a, pad, o = s.alignment, s.padding, s.overflow
    console.print(f"[bold]{s.packing['algorithm']}[/] · tp={a['tp']} cp={a['cp']} "
                  f"sp={'on' if a['sp'] else 'off'} fp8={a['fp8']} · C={a['capacity']} "
                  f"U={a['usable']} · s={a['s']} t={a['t']} · {a['convention']} convention")
    t = Table(show_header=True, header_style="bold")
    t.add_column("figure")
    t.add_column("value", justify="right")
    t.add_column("share", justify="right")
    cap = pad.capacity_tokens
    t.add_row("sequences", f"{s.sequences:,}", "")
    t.add_row("slabs", f"{s.slabs:,}", "")
    t.add_row("lower bound / L2", f"{s.lower_bound:,} / {s.l2_bound:,}",
              f"+{s.excess_over_bound:,} ({_pct(s.excess_over_bound, max(s.lower_bound, s.l2_bound))})")
    t.add_row("real tokens", f"{pad.real_tokens:,}", _pct(pad.real_tokens, cap))
    t.add_row("layout gaps (per sequence, CP)", f"{pad.layout_pad:,}", _pct(pad.layout_pad, cap))
    t.add_row("tail pads (per slab, TP/SP/FP8)", f"{pad.tail_pad:,}", _pct(pad.tail_pad, cap))
    t.add_row("fixed-length fill", f"{pad.fill_pad:,}", _pct(pad.fill_pad, cap))
    t.add_row("slack (unused capacity)", f"{pad.slack:,}", _pct(pad.slack, cap))
    t.add_row(f"overflow ({o.policy})", f"{o.sequences:,} sequences",
              f"chunks {o.chunks:,} · targets lost {o.targets_lost:,} · dropped {o.tokens_dropped:,}"
              f" · singletons {o.singletons:,}")
    if s.packing["dp"] > 1:
        t.add_row(f"dp={s.packing['dp']}", f"imbalance {100 * s.dp_imbalance:.2f}%",
                  f"{s.dp_moved:,} sequences moved")
    t.add_row("planning", f"{s.plan_seconds:.3f} s", "")
    console.print(t)


def print_verify_report(r, console: Console) -> None:
    """`packtool verify` in the terminal: a verdict line, then one line per problem (the first
    few of each check), each naming where, what broke, and expected vs found."""
    rate = r.physical_tokens / r.seconds if r.seconds else 0.0
    rate_s = f"{rate / 1e6:.1f}M" if rate >= 1e6 else f"{rate / 1e3:.0f}k"
    what = "structure and source tokens" if r.source_checked else "structure (no --source)"
    console.print(f"{r.directory}: {r.shards} shard(s) · {r.slabs:,} slabs · {r.physical_tokens:,} tokens "
                  f"({r.real_tokens:,} real, {r.loss_tokens:,} loss) · {what} · {r.seconds:.2f} s "
                  f"({rate_s} tokens/s)", highlight=False, soft_wrap=True)
    for n in r.notes:
        console.print(f"[yellow]note:[/] {n}", highlight=False, soft_wrap=True)
    if r.ok:
        console.print("[bold green]OK[/]: every invariant of FORMAT.md holds")
        return
    shown: dict = {}
    for p in r.problems:
        shown[p.check] = shown.get(p.check, 0) + 1
        ef = "" if p.expected is None and p.found is None else f" [dim](expected {p.expected}, found {p.found})[/]"
        console.print(f"[red]✗[/] [bold]{p.check}[/] {escape(p.location())}: {escape(p.message)}{ef}",
                      highlight=False, soft_wrap=True)
    for check, n in sorted(r.counts.items()):
        if n > shown.get(check, 0):
            console.print(f"  … {check}: {n - shown.get(check, 0):,} more not shown (--max-problems)")
    console.print(f"[bold red]FAILED[/]: {sum(r.counts.values()):,} problem(s) in "
                  f"{len(r.counts)} check(s): {', '.join(sorted(r.counts))}", highlight=False, soft_wrap=True)


# --- inspect -------------------------------------------------------------------------------
# One list of (label, value, share) figures feeds the terminal table and the HTML page, so
# the two cannot show different numbers; the JSON carries the same values unformatted.

_BLOCKS = " ▏▎▍▌▋▊▉█"


def bar(x: float, top: float, width: int = 30) -> str:
    """A unicode block bar of x/top of `width` cells, eighths included."""
    if top <= 0 or x <= 0:
        return ""
    eighths = int(round(8 * width * min(x / top, 1.0)))
    return "█" * (eighths // 8) + (_BLOCKS[eighths % 8] if eighths % 8 else "")


def fmt_int(x) -> str:
    return f"{int(x):,}"


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
         f"chunks {fmt_int(o.chunks)} · targets lost {fmt_int(o.targets_lost)} · dropped "
         f"{fmt_int(o.tokens_dropped)} · singletons {fmt_int(o.singletons)}"),
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


def print_inspect_report(r, console: Console) -> None:
    a = r.alignment
    console.print(f"[bold]{r.kind}[/] {r.path or ''} · {r.packing['algorithm']} · tp={a['tp']} cp={a['cp']} "
                  f"sp={'on' if a['sp'] else 'off'} fp8={a['fp8']} · C={a['capacity']:,} U={a['usable']:,}"
                  + (f" fixed={a['fixed_length']:,}" if a["fixed_length"] else "")
                  + f" · s={a['s']} t={a['t']} · {a['convention']} convention", highlight=False)
    t = Table(show_header=True, header_style="bold", title="Where the tokens went")
    for c, j in (("figure", "left"), ("value", "right"), ("share", "right")):
        t.add_column(c, justify=j)
    for row in inspect_figures(r):
        t.add_row(*row)
    console.print(t)
    line = what_if_line(r)
    if line:
        console.print(f"[bold cyan]{line}[/]", highlight=False)
    for title, h, integer in (("Slab fill (real tokens / U, non-singleton slabs)", r.fill_histogram, False),
                              ("Sequence lengths (tokens)", r.length_histogram, True)):
        ht = Table(title=title, show_header=True, header_style="bold")
        ht.add_column("bin")
        ht.add_column("slabs" if not integer else "sequences", justify="right")
        ht.add_column("")
        for row in histogram_rows(h, integer):
            ht.add_row(*row)
        console.print(ht)
    dt = Table(title=f"Per DP rank (dp={r.dp.dp})", show_header=True, header_style="bold")
    for c in ("rank", "slabs", "real tokens", "physical tokens", "compute", ""):
        dt.add_column(c, justify="right")
    top = max((x.compute for x in r.dp.ranks), default=0)
    for x in r.dp.ranks:
        dt.add_row(str(x.rank), fmt_int(x.slabs), fmt_int(x.real_tokens), fmt_int(x.physical_tokens),
                   f"{x.compute:,.0f}", bar(x.compute, top, 20))
    console.print(dt)
    wt = Table(title="Worst slabs (padding + unused capacity)", show_header=True, header_style="bold")
    for c in ("slab", "where", "segs", "real", "physical", "layout", "tail", "fill", "slack", "fill %"):
        wt.add_column(c, justify="right")
    for w in r.worst_slabs:
        wt.add_row(str(w.slab), w.location, str(w.segments), fmt_int(w.real_tokens), fmt_int(w.physical_tokens),
                   fmt_int(w.layout_pad), fmt_int(w.tail_pad), fmt_int(w.fill_pad), fmt_int(w.slack),
                   fmt_pct(w.fill) + (" singleton" if w.singleton else ""))
    console.print(wt)
    if r.compare:
        console.print(compare_table(r))
    console.print(f"inspect took {r.seconds:.2f} s", style="dim")


def compare_table(r) -> Table:
    ct = Table(title="Same lengths, other algorithms and conventions", show_header=True, header_style="bold")
    for c in ("convention", "algorithm", "s", "t", "slabs", "bound", "efficiency", "waste", ""):
        ct.add_column(c, justify="right")
    top = max((c.waste for c in r.compare if c.error is None), default=0)
    for c in r.compare:
        if c.error:
            ct.add_row(c.convention, c.algorithm, "", "", "", "", "", "", f"[red]{c.error}[/]")
            continue
        ct.add_row(c.convention, c.algorithm, str(c.s), str(c.t), fmt_int(c.slabs),
                   fmt_int(max(c.lower_bound, c.l2_bound)), fmt_pct(c.efficiency), fmt_pct(c.waste),
                   bar(c.waste, top, 20))
    return ct
