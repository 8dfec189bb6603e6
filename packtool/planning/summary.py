"""Plan statistics: where the tokens and the padding went, and which rows did not reach the
output as they were (`DataChanges`). One definition, used by `plan`, `pack` (its summary,
`--json` and the manifest's stats), `inspect` and `verify`."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

import numpy as np

from packtool.align import Alignment
from packtool.errors import arg, shown
from packtool.layout import Layout
from packtool.planning.core import MASK_FIGURES, OverflowStats, Plan
from packtool.tokenize.reply_roles import skipped_words


@dataclass(frozen=True)
class PaddingStats:
    slabs: int
    real_tokens: int
    physical_tokens: int  # sum of slab lengths on disk
    layout_pad: int  # per-sequence gaps (CP multiple s)
    tail_pad: int  # once per slab (TP/SP/FP8 multiple t)
    fill_pad: int  # fixed-length fill segments
    slack: int  # usable capacity left unused and not written (non-singleton slabs)
    singleton_slabs: int
    efficiency: float  # real / physical tokens

    @property
    def capacity_tokens(self) -> int:
        return self.physical_tokens + self.slack

    def to_dict(self) -> dict:
        return asdict(self)


def padding_stats(layout: Layout, align: Alignment, singleton: np.ndarray) -> PaddingStats:
    real = int(layout.seg_len.sum())
    phys = int(layout.slab_len.sum())
    normal = ~np.asarray(singleton, bool)
    slack = int(np.maximum(align.usable - layout.slab_len[normal], 0).sum())
    return PaddingStats(
        slabs=layout.n_bins, real_tokens=real, physical_tokens=phys,
        layout_pad=int(layout.layout_pad.sum()), tail_pad=int(layout.tail_pad.sum()),
        fill_pad=int(layout.fill.sum()), slack=slack, singleton_slabs=int((~normal).sum()),
        efficiency=real / phys if phys else 1.0)


@dataclass(frozen=True)
class DataChanges:
    """Every input row that is not in the output exactly as it was read: skipped while
    tokenizing (`--on-empty skip`), cut short (`--overflow truncate`, with the targets cut away
    and the sequences left with none) or cut into chunks (`--overflow split`, one next-token
    target lost per cut); and the rows packed that train nothing (`sequences_untrained`: those
    truncate left with no target, and the rows of one token, `sequences_one_token`, whose only
    token is a sequence's first, never a target)."""
    rows_skipped_empty: int = 0
    rows_skipped_all_masked: int = 0
    sequences_truncated: int = 0
    tokens_dropped: int = 0
    sequences_split: int = 0
    chunks: int = 0
    targets_lost: int = 0
    sequences_untrained: int = 0  # truncate's cut to no target + sequences_one_token (absent in older manifests)
    sequences_one_token: int = 0  # rows of one token, packed: they train nothing (S45A-7; absent in older manifests)

    @property
    def rows_skipped(self) -> int:
        return self.rows_skipped_empty + self.rows_skipped_all_masked

    def any(self) -> bool:
        return any(asdict(self).values())

    def warning(self, why_skipped: str = "", loss_counted: bool = True, first_untrained: str = "",
                first_one_token: str = "") -> str | None:
        """One line saying what changed, or None when nothing did (`why_skipped`: more words on
        the skipped rows; `loss_counted`: whether the targets truncate or split took were
        counted from the loss masks, which a plan of lengths does not see; `first_untrained`: where the first
        sequence cut to no target was read; `first_one_token`: where the first row of one token was)."""
        parts = []
        if self.rows_skipped:
            parts.append(f"{self.rows_skipped:,} row(s) skipped by {arg('on_empty', 'skip')} "
                         f"({self.rows_skipped_empty:,} empty, {self.rows_skipped_all_masked:,} "
                         f"with no loss tokens){why_skipped}")
        if self.sequences_truncated:
            targets = (f", {self.targets_lost:,} of them target(s)" if loss_counted
                       else ", targets among them not counted (lengths only)")
            parts.append(f"{self.tokens_dropped:,} token(s) dropped from {self.sequences_truncated:,} "
                         f"sequence(s) by {arg('overflow', 'truncate')}{targets}")
            cut = self.sequences_untrained - self.sequences_one_token
            if cut:
                at = f" (first: {first_untrained})" if first_untrained else ""
                # packed all the same: --on-empty judges a row as read, and the cut is this pack's
                parts.append(f"{cut:,} of those sequence(s) kept no target and train "
                             f"nothing{at}: raise {arg('capacity')}, or {arg('overflow', 'split')} keeps "
                             f"their targets in later chunks")
        if self.sequences_split:
            lost = (f"{self.targets_lost:,} target(s) lost at the cuts" if loss_counted
                    else "targets lost at the cuts not counted (lengths only)")
            # a chunk is a segment of its own: nothing in a batch ties it to its row's other chunks
            parts.append(f"{self.sequences_split:,} sequence(s) split into {self.chunks:,} chunks by "
                         f"{arg('overflow', 'split')} ({lost}); a per-sequence loss (GRPO's seq-mean-token-mean) "
                         f"counts each chunk as a sequence: where a row must stay one, raise {arg('capacity')} "
                         f"or pass {arg('overflow', 'error')}")
        if self.sequences_one_token:
            at = f"; first: {first_one_token}" if first_one_token else ""
            # kept, never refused (the owner's rule): a row without labels is every token a target.
            # Worded for plan and pack --dry-run too, which pack nothing
            parts.append(f"{self.sequences_one_token:,} row(s) of one token kept in the slabs, though they train "
                         f"nothing (a sequence's first token is never a target{at}): drop such rows if they "
                         f"should not take room there")
        return "; ".join(parts) or None


def data_changes(overflow: OverflowStats, skipped: dict | None = None, one_token: int = 0) -> DataChanges:
    """`one_token`: the rows of one token packed (planning.cut_targets.one_token_rows)."""
    skipped = skipped or {}
    trunc = overflow.policy == "truncate"
    split = overflow.policy == "split"
    return DataChanges(
        rows_skipped_empty=int(skipped.get("empty", 0)),
        rows_skipped_all_masked=int(skipped.get("all_masked", 0)),
        sequences_truncated=overflow.sequences if trunc else 0,
        tokens_dropped=overflow.tokens_dropped,
        sequences_split=overflow.sequences if split else 0,
        chunks=overflow.chunks, targets_lost=overflow.targets_lost,
        sequences_untrained=overflow.untrained + int(one_token), sequences_one_token=int(one_token))


def unknown_figures(o: OverflowStats, loss_counted: bool) -> tuple[str, ...]:
    """The overflow figures a plan cannot know: those the loss masks hold (MASK_FIGURES) when the
    masks were not read (a plan of lengths, a plan file), unless no row was cut, where 0 is
    certain. The one rule of `plan` and `inspect --plan`, table (`?`) and --json (null) alike: a
    reader of either took 0 targets lost for a fact (RB-6)."""
    if loss_counted or o.sequences == 0:
        return ()
    return MASK_FIGURES.get(o.policy, ())


def overflow_dict(o: OverflowStats, loss_counted: bool) -> dict:
    """`o` as --json writes it: the figures not known (`unknown_figures`) null."""
    d = asdict(o)
    for k in unknown_figures(o, loss_counted):
        d[k] = None
    return d


def overflow_text(o: OverflowStats, loss_counted: bool = True, fmt=lambda n: f"{n:,}") -> str:
    """The overflow figures as the pack/plan summary and `inspect` show them. Under truncate
    without the loss masks (a plan of lengths) the targets cut are unknown, never said as 0."""
    unknown = unknown_figures(o, loss_counted)
    lost = "? (lengths only)" if "targets_lost" in unknown else fmt(o.targets_lost)
    text = (f"chunks {fmt(o.chunks)} · targets lost {lost} · dropped {fmt(o.tokens_dropped)} · "
            f"singletons {fmt(o.singletons)}")
    return text + (f" · untrained {fmt(o.untrained)}" if o.policy == "truncate" and "untrained" not in unknown
                   else "")


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
    # rows dropped before planning (the tokenized cache's `skipped`: empty / all_masked)
    skipped_rows: dict = field(default_factory=lambda: {"empty": 0, "all_masked": 0})
    # numba kernel compiles (a first run on a machine) and loads from numba's cache (once per
    # process) during planning; neither is in plan_seconds
    compile_seconds: float = 0.0
    load_seconds: float = 0.0
    # NaN / +-inf values of float side columns, kept as they are (the cache's side_nonfinite):
    # column -> {"nan": n, "inf": n, "first": {file, row, token, value}}
    side_nonfinite: dict = field(default_factory=dict)
    # per role, the skipped chat rows with no trained turn that had it (the cache's skipped.roles)
    skipped_roles: dict = field(default_factory=dict)
    # whether truncate's targets were counted from the loss masks (pack: `with_cache`); a plan
    # of lengths alone cannot, and says so rather than "targets lost 0"
    loss_counted: bool = False
    first_untrained: str = ""  # where the first sequence truncate cut to no target was read
    # rows of one token packed, which train nothing (pack: `with_cache`), and where the first was read
    one_token_rows: int = 0
    first_one_token: str = ""

    def changes_warning(self) -> str | None:
        """`changes.warning()`, saying the roles of the skipped chat rows with no trained turn."""
        return self.changes.warning(skipped_words(self.skipped_roles), self.loss_counted, self.first_untrained,
                                    self.first_one_token)

    def nonfinite_warning(self) -> str | None:
        """One line naming the side columns that hold NaN / +-inf values, or None."""
        parts = []
        for name, e in self.side_nonfinite.items():
            f = e.get("first") or {}
            parts.append(f"side column {name} holds {e['nan']:,} NaN and {e['inf']:,} +-inf value(s) (first "
                         f"{f.get('value')} in {f.get('file')} row {f.get('row')} token {f.get('token')})")
        if not parts:
            return None
        return "; ".join(parts) + ": kept as they are; a NaN log-prob makes a PPO loss NaN (rows and tokens count from 0)"

    @property
    def changes(self) -> DataChanges:
        return data_changes(self.overflow, self.skipped_rows, self.one_token_rows)

    def to_dict(self) -> dict:
        """--json's object. A plan of lengths alone cannot know the figures the loss masks hold
        where a row was cut (`unknown_figures`): they are null here, as in its table's `?` and
        inspect of a plan file, never 0."""
        d = asdict(self)
        d["changes"] = asdict(self.changes)
        unknown = unknown_figures(self.overflow, self.loss_counted)
        d["overflow"] = overflow_dict(self.overflow, self.loss_counted)
        if "targets_lost" in unknown:
            d["changes"]["targets_lost"] = None
        if "untrained" in unknown:  # truncate's cut to no target is part of it; the one-token rows stay counted
            d["changes"]["sequences_untrained"] = None
        return d


def with_skipped(summary: PlanSummary, skipped: dict | None, nonfinite: dict | None = None) -> PlanSummary:
    """`summary` counting the rows the tokenizer skipped (a cache's `skipped`) and the
    non-finite side values it kept (a cache's `side_nonfinite`)."""
    skipped = skipped or {}
    return replace(summary, skipped_rows={"empty": int(skipped.get("empty", 0)),
                                          "all_masked": int(skipped.get("all_masked", 0))},
                   skipped_roles=dict(skipped.get("roles") or {}),
                   side_nonfinite=dict(nonfinite or {}))


def with_cache(summary: PlanSummary, cache) -> PlanSummary:
    """`summary` with what only the tokenized cache (`tokenize.TokenizedCache`) knows: the rows
    it skipped, its non-finite side values, its rows of one token (packed, training nothing) and,
    under truncate or split, the targets the cuts took (and the sequences truncate left with none:
    planning.cut_targets). Every engine's pack asks this."""
    from packtool.planning.cut_targets import cut_targets_of_cache, one_token_rows
    s = with_skipped(summary, cache.skipped, getattr(cache, "side_nonfinite", None))
    o = s.overflow
    cuts = o.policy in MASK_FIGURES and bool(o.sequences)
    # the cuts need every length at once: read the column once for both counts (it was read twice);
    # otherwise a batch at a time, memory bounded
    lengths = cache.lengths() if cuts else None
    n_one, first_one = one_token_rows(cache.length_batches() if lengths is None else lengths)
    s = replace(s, one_token_rows=n_one, first_one_token=_where(cache, first_one))
    if not cuts:
        return replace(s, loss_counted=True)
    cut = cut_targets_of_cache(cache, lengths, s.alignment["usable"], split=o.policy == "split")
    return with_cut_targets(s, cut, _where(cache, cut.first_untrained))


def with_lengths(summary: PlanSummary, lengths, source: str | None = None) -> PlanSummary:
    """`summary` of a plan of `lengths` alone (`plan --lengths`): its rows of one token, which
    train nothing in a slab and which pack counts from its cache (`with_cache`), counted by the
    same rule (planning.cut_targets.one_token_rows); the first named as row N of `source`."""
    from packtool.planning.cut_targets import one_token_rows
    n, first = one_token_rows(np.asarray(lengths))
    where = "" if first < 0 else f"{shown(source)} row {first}" if source else f"row {first}"
    return replace(summary, one_token_rows=n, first_one_token=where)


def _where(cache, row: int) -> str:
    """Cache row `row` as the input file and row it was read from ("" for -1)."""
    if row < 0:
        return ""
    from packtool.tokenize.source_rows import SourceRows
    path, r = SourceRows(cache).locate(row)
    return f"{shown(path)} row {r}" if path else f"row {r}"


def with_cut_targets(summary: PlanSummary, cut, where: str = "") -> PlanSummary:
    """`summary` under truncate or split with the targets the cuts took and the sequences
    truncate left with none (a `planning.cut_targets.CutTargets`; `where`: the first such
    sequence's input row)."""
    return replace(summary, overflow=replace(summary.overflow, targets_lost=cut.targets, untrained=cut.untrained),
                   loss_counted=True, first_untrained=where)


def plan_summary(p: Plan) -> PlanSummary:
    a = p.alignment
    bound = max(p.lower_bound, p.l2_bound)
    return PlanSummary(
        alignment=dict(tp=a.tp, cp=a.cp, sp=a.sp, fp8=a.fp8, capacity=a.capacity,
                       fixed_length=a.fixed_length, convention=a.convention, s=a.s, t=a.t,
                       usable=a.usable),
        packing=asdict(p.packing), sequences=p.num_sequences, segments=int(p.segments.length.size),
        slabs=p.num_slabs, lower_bound=p.lower_bound, l2_bound=p.l2_bound,
        excess_over_bound=p.num_slabs - bound,
        padding=padding_stats(p.layout, a, p.singleton), overflow=p.overflow,
        dp_imbalance=p.dp_imbalance, dp_moved=p.dp_moved, plan_seconds=p.seconds,
        compile_seconds=p.compile_seconds, load_seconds=p.load_seconds)
