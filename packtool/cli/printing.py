"""Plan summaries for people (rich tables) and programs (JSON): the figures `plan` prints."""
from __future__ import annotations

import re
import shlex

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from packtool.errors import number_base, shown
from packtool.notes import note
from packtool.planning.summary import PlanSummary, overflow_text


def pasteable(path: str) -> str:
    """`path` as a shell word that pastes as it is: quoted (spaces, brackets), and one holding
    control characters as bash's $'...' with them escaped (shlex's quotes would put them raw on
    the terminal, and a newline would split the command)."""
    if shown(path) == path:
        return shlex.quote(path)
    return "$'" + shown(path.replace("\\", "\\\\").replace("'", "\\'")) + "'"


def _seen(text: object) -> str:
    """User text (a path, a column name, a value) inside a rich markup line: escaped for rich and
    for the terminal (errors.shown)."""
    return escape(shown(text))


def _pct(x: int, total: int) -> str:
    return f"{100.0 * x / total:.2f}%" if total else "-"


def plan_compile_note(compiled: float, loaded: float = 0.0) -> str:
    """The planning row's note: kernel compiles (a first run on a machine) and loads from
    numba's cache (once per process) are timed apart from planning, never in it."""
    parts = [f"+{s:.2f} s kernel {what}" for s, what in ((compiled, "compile"), (loaded, "load"))
             if s >= 0.005]
    return ", ".join(parts) + ", not included" if parts else ""


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
              overflow_text(o, s.loss_counted))
    if s.packing["dp"] > 1:
        t.add_row(f"dp={s.packing['dp']}", f"imbalance {100 * s.dp_imbalance:.2f}%",
                  f"{s.dp_moved:,} sequences moved")
    t.add_row("planning", f"{s.plan_seconds:.3f} s", plan_compile_note(s.compile_seconds, s.load_seconds))
    console.print(t)
    # on stderr, as every note is: stdout is the result, which a job may keep or send to /dev/null
    changed = s.changes_warning()
    if changed:  # never silent: what did not reach the output as it was read
        note(changed, label="warning")
    odd = s.nonfinite_warning()
    if odd:  # kept as read, but what poisons a loss is never silent either
        note(odd, label="warning")


_ROW = re.compile(r"\brows? \d")
_IN_ROW = re.compile(r"\b(segments?|positions?) \d")


def problem_text(p) -> str:
    """A verify problem's where and what, saying what its numbers count from as every packtool
    error does (errors.number_base): rows (of a shard, of the source), segments and positions
    from 0."""
    text = f"{p.location()}: {p.message}"
    base = number_base(text, p.row is not None or _ROW.search(p.message) is not None)
    if base and _IN_ROW.search(text):  # "segment 0 ... position 5": rows' base alone left these unsaid
        base = base.replace("rows count from 0", "rows count from 0, segments and positions too")
    return f"{text} ({base})" if base else text


def _values_said(p) -> bool:
    """Whether a problem's message states its expected and found values already ("holds -0.1,
    the source has -0.2"): the terminal line then says them once (--json keeps the fields)."""
    def said(v) -> bool:
        return any(re.search(rf"(?<![\w.-]){re.escape(t)}(?!\w|\.\d)", p.message) for t in {str(v), repr(v)})
    return all(said(v) for v in (p.expected, p.found) if v is not None)


def print_verify_report(r, console: Console) -> None:
    """`packtool verify` in the terminal: a verdict line, then one line per problem (the first
    few of each check), each naming where, what broke, and expected vs found."""
    rate = r.physical_tokens / r.seconds if r.seconds else 0.0
    rate_s = f"{rate / 1e6:.1f}M" if rate >= 1e6 else f"{rate / 1e3:.0f}k"
    what = "structure and source tokens" if r.source_checked else "structure (no --source)"
    if not (set(r.counts) == {"manifest"} and not r.shards):  # nothing read: no figures to print
        console.print(f"{_seen(r.directory)}: {r.shards} shard(s) · {r.slabs:,} slabs · {r.physical_tokens:,} tokens "
                      f"({r.real_tokens:,} real, {r.loss_tokens:,} loss) · {what} · {r.seconds:.2f} s "
                      f"({rate_s} tokens/s)", highlight=False, soft_wrap=True)
    for n in r.notes:  # on stderr with every other note: stdout is the report a job keeps
        note(n, label="note")
    if r.ok:
        console.print("[bold green]OK[/]: every invariant of FORMAT.md holds")
        return
    shown: dict = {}
    for p in r.problems:
        shown[p.check] = shown.get(p.check, 0) + 1
        ef = "" if (p.expected is None and p.found is None) or _values_said(p) else \
            f" [dim](expected {_seen(p.expected)}, found {_seen(p.found)})[/]"
        console.print(f"[red]✗[/] [bold]{p.check}[/] {_seen(problem_text(p))}{ef}", highlight=False, soft_wrap=True)
    for check, n in sorted(r.counts.items()):
        if n > shown.get(check, 0):
            console.print(f"  … {check}: {n - shown.get(check, 0):,} more not shown (--max-problems)")
    console.print(f"[bold red]FAILED[/]: {sum(r.counts.values()):,} problem(s) in "
                  f"{len(r.counts)} check(s): {', '.join(sorted(r.counts))}", highlight=False, soft_wrap=True)


# --- inspect -------------------------------------------------------------------------------
# One list of (label, value, share) figures feeds the terminal table and the HTML page, so
# the two cannot show different numbers; the JSON carries the same values unformatted.


def print_inspect_report(r, console: Console) -> None:
    # inspect's figures load only for inspect: `pack` and `verify` never import the inspect stage
    from packtool.inspection.figures import bar, fmt_int, fmt_pct, histogram_rows, inspect_figures, what_if_line
    a = r.alignment
    console.print(f"[bold]{r.kind}[/] {_seen(r.path or '')} · {r.packing['algorithm']} · tp={a['tp']} cp={a['cp']} "
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
    heads = ("rank", "slabs", "real tokens", "physical tokens", "compute")
    cells = [(str(x.rank), fmt_int(x.slabs), fmt_int(x.real_tokens), fmt_int(x.physical_tokens),
              f"{x.compute:,.0f}") for x in r.dp.ranks]
    for c in heads:
        dt.add_column(c, justify="right", no_wrap=True)
    bw = _bar_width(console, heads, cells)
    if bw:
        dt.add_column("", no_wrap=True)
    top = max((x.compute for x in r.dp.ranks), default=0)
    for x, row in zip(r.dp.ranks, cells):
        dt.add_row(*row, *([bar(x.compute, top, bw)] if bw else []))
    console.print(dt)
    wt = Table(title="Worst slabs (padding + unused capacity)", show_header=True, header_style="bold")
    # numbers are never cut (80 columns showed "44.4…" and "physi…"): `where` needs ~28 columns
    # beside the nine numbers, so a narrow terminal leaves it to the caption's pointer
    where = console.width >= 110
    if not where:
        wt.caption = "each slab's shard and row: widen the terminal to 110 columns, or --json"
    for c in ("slab",) + (("where",) if where else ()) + ("segs", "real", "physical", "layout", "tail",
                                                          "fill", "slack", "fill %"):
        wt.add_column(c, justify="right", no_wrap=True)
    for w in r.worst_slabs:
        wt.add_row(str(w.slab), *([_seen(w.location)] if where else []), str(w.segments), fmt_int(w.real_tokens),
                   fmt_int(w.physical_tokens), fmt_int(w.layout_pad), fmt_int(w.tail_pad), fmt_int(w.fill_pad),
                   fmt_int(w.slack), fmt_pct(w.fill) + (" singleton" if w.singleton else ""))
    console.print(wt)
    if r.side_columns:
        console.print(side_table(r, console))
    if r.compare:
        console.print(compare_table(r, console))
    console.print(f"inspect took {r.seconds:.2f} s", style="dim")


def side_table(r, console: Console) -> Table:
    """The side columns' table. On a narrow terminal (80 columns: K's "20" was cut to "…") the
    heads take two lines, and a long column name wraps before any figure is cut."""
    from packtool.inspection.side import SIDE_HEAD, side_rows
    rows = [list(map(_seen, row)) for row in side_rows(r)]
    wide = 1 + sum(max([len(h)] + [len(row[i]) for row in rows]) + 3 for i, h in enumerate(SIDE_HEAD))
    st = Table(title="Side columns (FORMAT.md, Side columns)", show_header=True, header_style="bold")
    for i, h in enumerate(SIDE_HEAD):
        st.add_column(h if wide <= console.width else "\n".join(h.rsplit(" ", 1)),
                      justify="left" if i in (0, 1, 3) else "right", no_wrap=i != 0, overflow="fold")
    for row in rows:
        st.add_row(*row)
    return st


def _bar_width(console: Console, headers: tuple[str, ...], rows: list[tuple[str, ...]]) -> int:
    """Cells left for a bar column beside these columns of figures (0: leave the bar out, so
    the figures are never cut to "…" on a narrow terminal). A column takes its widest cell
    plus 3 (padding and rule); the bar column the same."""
    used = 1 + sum(max([len(h)] + [len(r[i]) for r in rows]) + 3 for i, h in enumerate(headers)) + 3
    w = min(20, console.width - used)
    return w if w >= 4 else 0


def compare_table(r, console: Console) -> Table:
    from packtool.inspection.figures import bar, fmt_int, fmt_pct
    ct = Table(title="Same lengths, other algorithms and conventions", show_header=True, header_style="bold")
    heads = ("convention", "algorithm", "s", "t", "slabs", "bound", "efficiency", "waste")
    cells = [(c.convention, c.algorithm, str(c.s), str(c.t), fmt_int(c.slabs),
              fmt_int(max(c.lower_bound, c.l2_bound)), fmt_pct(c.efficiency), fmt_pct(c.waste))
             for c in r.compare if not c.error]
    for h in heads:
        ct.add_column(h, justify="right", no_wrap=True)
    bw = _bar_width(console, heads, cells)
    last = bw or any(c.error for c in r.compare)  # the bar, or the reason a combination failed
    if last:
        ct.add_column("")
    top = max((c.waste for c in r.compare if c.error is None), default=0)
    ok = iter(cells)
    for c in r.compare:
        if c.error:
            ct.add_row(c.convention, c.algorithm, "", "", "", "", "", "", f"[red]{_seen(c.error)}[/]")
            continue
        ct.add_row(*next(ok), *([bar(c.waste, top, bw) if bw else ""] if last else []))
    return ct
