"""Plan summaries for people (rich tables) and programs (JSON): the figures `plan` prints."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from rich.console import Console
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
    """`packtool verify` in the terminal: a verdict line, then the problems (first of each check)."""
    rate = r.physical_tokens / r.seconds / 1e6 if r.seconds else 0.0
    what = "structure and source tokens" if r.source_checked else "structure (no --source)"
    head = (f"{r.directory}: {r.shards} shard(s) · {r.slabs:,} slabs · {r.physical_tokens:,} tokens "
            f"({r.real_tokens:,} real, {r.loss_tokens:,} loss) · {what} · {r.seconds:.2f} s "
            f"({rate:.0f}M tokens/s)")
    console.print(head, highlight=False, soft_wrap=True)
    for n in r.notes:
        console.print(f"[yellow]note:[/] {n}", highlight=False, soft_wrap=True)
    if r.ok:
        console.print("[bold green]OK[/]: every invariant of FORMAT.md holds")
        return
    t = Table(show_header=True, header_style="bold", title=f"{sum(r.counts.values()):,} problem(s)")
    t.add_column("check")
    t.add_column("where")
    t.add_column("what broke", overflow="fold")
    t.add_column("expected", overflow="fold")
    t.add_column("found", overflow="fold")
    shown: dict = {}
    for p in r.problems:
        shown[p.check] = shown.get(p.check, 0) + 1
        t.add_row(p.check, p.location(), p.message, "" if p.expected is None else str(p.expected),
                  "" if p.found is None else str(p.found))
    console.print(t)
    for check, n in sorted(r.counts.items()):
        if n > shown.get(check, 0):
            console.print(f"  … {check}: {n - shown.get(check, 0):,} more not shown (--max-problems)")
    console.print("[bold red]FAILED[/]")
