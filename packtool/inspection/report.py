"""`packtool inspect`: where the tokens and the padding went, before or after packing.

Three ways in, one report: a packed output (`inspect_packed`), a plan Parquet written by
`packtool plan --output` (`inspect_plan_file`) or a list of lengths (`inspect_lengths`).
Each becomes a `SlabSet` (which real segments sit in which slab); the layout is recomputed
with `layout.compute_layout` and the padding counted with `stats.padding_stats`, the same
code the packer and `verify` use, so the figures cannot drift from what is on disk.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

import numpy as np

from packtool.align import Alignment
from packtool.errors import PacktoolInputError, arg, cli_flag
from packtool.integers import int_array
from packtool.inspection.compare import CompareRow, WhatIf
from packtool.layout import compute_layout
from packtool.params import arguments, expect
from packtool.packers import ATTN_COEF
from packtool.planning.core import OverflowStats, PackingConfig, Plan, PlanError, SequenceError
from packtool.planning.core import plan as make_plan
from packtool.planning.summary import PaddingStats, padding_stats

SCHEMA = "packtool-inspect"
SCHEMA_VERSION = 1
FILL_BINS = 10
WORST = 10


class InspectError(PacktoolInputError):
    """The input cannot be inspected as asked; the message names the file and the fix."""


@dataclass(frozen=True)
class SlabSet:
    """What sits in each slab, however it was learned (plan, plan file, packed output)."""

    alignment: Alignment
    packing: PackingConfig
    seg_len: np.ndarray  # int64 real tokens of each real segment, slab by slab
    slab_offsets: np.ndarray  # int64[n_slabs+1]
    singleton: np.ndarray  # bool per slab
    dp_rank: np.ndarray  # int per slab
    step: np.ndarray  # int per slab
    overflow: OverflowStats
    num_sequences: int
    source_lengths: np.ndarray  # int64 per source row (reassembled chunks for packed input)
    loss_tokens: np.ndarray | None = None  # per slab, packed outputs only
    locations: list[str] | None = None  # "shard row" per slab, packed outputs only


@dataclass(frozen=True)
class Histogram:
    edges: list[float]  # bin b counts values in [edges[b], edges[b+1]) (last bin closed)
    counts: list[int]
    unit: str


@dataclass(frozen=True)
class RankLoad:
    rank: int
    slabs: int
    real_tokens: int
    physical_tokens: int
    compute: float  # sum over segments of footprint + ATTN_COEF * len^2 (packers.dp's cost)


@dataclass(frozen=True)
class DpReport:
    dp: int
    ranks: list[RankLoad]
    token_imbalance: float  # (max - mean) / mean of the ranks' real tokens
    compute_imbalance: float  # the same over the ranks' compute
    step_imbalance: float  # mean over steps of (max - mean) / mean of per-rank compute


@dataclass(frozen=True)
class SlabLoad:
    slab: int  # position in on-disk / plan order
    location: str  # "slabs-00003.parquet row 17" for packed outputs, else "slab N"
    segments: int
    real_tokens: int
    physical_tokens: int
    layout_pad: int
    tail_pad: int
    fill_pad: int
    slack: int
    fill: float  # real tokens / usable capacity
    singleton: bool



@dataclass(frozen=True)
class InspectReport:
    kind: str  # packed | plan | lengths
    path: str | None
    alignment: dict
    packing: dict
    sequences: int
    segments: int
    slabs: int
    real_tokens: int
    loss_tokens: int | None  # packed outputs only
    physical_tokens: int
    capacity_tokens: int  # physical + slack
    lower_bound: int
    l2_bound: int
    excess_over_bound: int  # slabs - max(lower_bound, l2_bound)
    efficiency: float  # real / physical
    waste: float  # (padding + slack) / capacity_tokens
    padding: PaddingStats
    overflow: OverflowStats
    fill_histogram: Histogram  # real tokens / U per non-singleton slab
    length_histogram: Histogram  # source sequence lengths (power-of-two bins)
    dp: DpReport
    worst_slabs: list[SlabLoad]
    compare: list[CompareRow] = field(default_factory=list)
    what_if: WhatIf | None = None
    seconds: float = 0.0
    side_columns: list = field(default_factory=list)  # inspection/side.SideColumnReport, packed outputs

    def to_dict(self) -> dict:
        d = asdict(self)
        return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, **d}


# --- ways in ---------------------------------------------------------------------------

def slabs_from_plan(p: Plan, source_lengths: np.ndarray | None = None) -> SlabSet:
    src_len = source_lengths if source_lengths is not None else _reassemble(p.segments.source, p.segments.length)
    return SlabSet(p.alignment, p.packing, p.segments.length, p.slab_offsets, p.singleton, p.dp_rank,
                   p.step, p.overflow, p.num_sequences, np.asarray(src_len, np.int64))


def inspect_lengths(lengths, alignment: Alignment | None = None, packing: PackingConfig | None = None,
                    compare: bool = False, what_if: bool = True, path: str | None = None) -> InspectReport:
    """`path`: the lengths file, named in the report (None: lengths given in memory)."""
    import time
    t0 = time.perf_counter()
    compare, what_if, path = arguments(compare=compare, what_if=what_if, path=path)
    alignment = expect(alignment, Alignment, "inspect_lengths", "alignment", optional=True) or Alignment()
    expect(packing, PackingConfig, "inspect_lengths", "packing", optional=True)
    lengths = int_array(lengths, "lengths", PlanError, at=SequenceError)  # before an int64 cast truncates a float
    p = make_plan(lengths, alignment, packing or PackingConfig())
    return build_report("lengths", path, slabs_from_plan(p, lengths), compare, what_if, t0)


def inspect_plan_file(path: str, alignment: Alignment | None = None, packing: PackingConfig | None = None,
                      compare: bool = False, what_if: bool = True) -> InspectReport:
    """A plan Parquet (`packtool plan --output`) records the settings it was made with; None
    uses them, settings passed must agree. An older plan file records none: pass the flags
    `plan` used. The stored padded lengths are checked against the settings either way."""
    import time

    import pyarrow.parquet as pq
    t0 = time.perf_counter()
    if not os.path.exists(path):
        raise InspectError(f"{path}: no such file", flag=cli_flag("plan"))
    if os.path.isdir(path):  # pyarrow reads a folder as a dataset and names its own internals
        raise InspectError(f"{path}: a folder; give the one Parquet file a plan wrote (`packtool plan "
                           f"--output`, write_plan)", flag=cli_flag("plan"))
    from packtool.output.files import refuse_special_input
    refuse_special_input(path, "plan", InspectError)
    try:
        t = pq.read_table(path, columns=["slab", "dp_rank", "step", "source_index", "chunk_index",
                                          "length", "padded"])
    except (OSError, ValueError, KeyError, TypeError) as e:  # pyarrow: damaged or not a plan file
        raise InspectError(f"{path}: cannot be read as a plan file ({' '.join(str(e).split())[:200]}); "
                           f"write it with `packtool plan --output`") from None
    alignment, packing = plan_settings(path, alignment, packing)
    col = {c: t.column(c).to_numpy() for c in t.column_names}
    slab = col["slab"].astype(np.int64)
    if slab.size and (np.diff(slab) < 0).any():
        raise InspectError(f"{path}: rows are not grouped by slab; write it with `packtool plan --output`")
    counts = np.bincount(slab) if slab.size else np.zeros(0, np.int64)
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    seg_len = col["length"].astype(np.int64)
    lay = compute_layout(seg_len, offsets, alignment)
    stored = col["padded"].astype(np.int64)
    if not np.array_equal(lay.seg_padded[~lay.is_fill], stored):
        i = int(np.flatnonzero(lay.seg_padded[~lay.is_fill] != stored)[0])
        raise InspectError(
            f"{path}: segment row {i} is padded to {int(stored[i])} in the file but "
            f"{int(lay.seg_padded[~lay.is_fill][i])} under {alignment.describe()} C={alignment.capacity}: "
            f"pass the same {'/'.join(arg(n) for n in ('tp', 'cp', 'sp', 'fp8', 'capacity', 'fixed_length', 'convention'))} as `plan`")
    first = offsets[:-1]
    single = (counts == 1) & (alignment.seq_footprint(seg_len[first]) > alignment.usable)
    over = np.flatnonzero(~single & (lay.footprint > alignment.usable))
    if over.size:  # the plan was made for a larger capacity: every figure would be wrong
        b = int(over[0])
        raise InspectError(
            f"{path}: slab {b} holds {int(lay.footprint[b]):,} tokens, more than U={alignment.usable:,} of "
            f"C={alignment.capacity:,}: the plan was made with a larger {arg(alignment.usable_arg)}; pass the same "
            f"{arg('capacity')}/{arg('fixed_length')} (and {arg('tp')}/{arg('cp')}/{arg('fp8')}/...) as `plan`",
            flag=cli_flag(alignment.usable_arg))
    src = col["source_index"].astype(np.int64)
    chunk = col["chunk_index"].astype(np.int64)
    ovf = _overflow_from_chunks(src, chunk, packing.overflow, int(single.sum()))
    src_len = _reassemble(src, seg_len)
    ss = SlabSet(alignment, packing, seg_len, offsets, single, col["dp_rank"][first],
                 col["step"][first], ovf, int(src_len.size), src_len)
    return build_report("plan", path, ss, compare, what_if, t0)


def plan_settings(path: str, alignment: Alignment | None,
                  packing: PackingConfig | None) -> tuple[Alignment, PackingConfig]:
    """The settings to read a plan file with: the ones it records, or those passed (which
    must agree with the recorded ones)."""
    from packtool.planning.plan_file import plan_flags, read_plan_config
    stored = read_plan_config(path)
    if stored is None:
        if alignment is None:
            raise InspectError(f"{path}: this plan file records no settings (an older packtool): "
                               f"pass the settings `plan` used ({arg('capacity')}, {arg('tp')}, {arg('cp')}, ...)")
        return alignment, packing or PackingConfig()
    sa, sp = stored
    a, pk = alignment or sa, packing or sp
    if (a, pk) != (sa, sp):
        raise InspectError(f"{path}: made with {plan_flags(sa, sp)}, but {plan_flags(a, pk)} was "
                           f"passed: drop them (the file records its settings) or pass the same")
    return a, pk


def inspect_packed(directory: str, compare: bool = False, what_if: bool = True,
                   progress: bool = False) -> InspectReport:
    """Reports from the small columns of each shard, one shard at a time, after every check a
    reader makes (`slabs.reader.check_rows`: the open checks, each shard's checksum, every row
    group's layout, pads, loss flags and token ids): a report is never clean on an output a
    training run would refuse (FORMAT.md, "What a reader checks")."""
    import time

    from packtool.slabs.format import SlabManifest
    from packtool.slabs.reader import check_rows
    t0 = time.perf_counter()
    directory, compare, what_if, progress = arguments(directory=directory, compare=compare, what_if=what_if,
                                                      progress=progress)
    sm = SlabManifest.read(directory)
    check_rows(sm)
    man, align, packing = sm.raw, sm.alignment, sm.packing
    cols = ["seq_lens", "source_index", "chunk_index", "num_loss_tokens", "singleton", "dp_rank", "step",
            "layout_pad", "tail_pad", "fill_pad"]
    parts: dict[str, list] = {k: [] for k in ("len", "src", "chunk", "nseg", "loss", "single", "rank", "step",
                                              "layout_pad", "tail_pad", "fill_pad")}
    locations: list[str] = []
    from packtool.progress import bar, large
    paths = [sm.shard_path(i) for i in range(len(sm.shards))]
    with bar("Reading", len(paths), "shards", progress and large(paths)) as advance:
        for i, name in enumerate(sm.shards):
            _read_shard(directory, paths[i], name, cols, parts, locations)
            advance(1)
    cat = {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in parts.items()}
    _check_stored_layout(sm, cat, ovf_of=lambda: _overflow_from_chunks(cat["src"], cat["chunk"], packing.overflow,
                                                                       int(cat["single"].sum())))
    seg_len = cat["len"].astype(np.int64)
    offsets = np.concatenate(([0], np.cumsum(cat["nseg"]))).astype(np.int64)
    st = man.get("stats", {}).get("overflow", {})
    ovf = OverflowStats(**{k: st[k] for k in OverflowStats.__dataclass_fields__ if k in st}) if st \
        else _overflow_from_chunks(cat["src"], cat["chunk"], packing.overflow, int(cat["single"].sum()))
    src_len = _reassemble(cat["src"].astype(np.int64), seg_len)
    ss = SlabSet(align, packing, seg_len, offsets, cat["single"].astype(bool), cat["rank"], cat["step"],
                 ovf, int(man.get("stats", {}).get("sequences", src_len.size)), src_len,
                 cat["loss"].astype(np.int64), locations)
    from dataclasses import replace

    from packtool.inspection.side import side_reports
    rep = build_report("packed", directory, ss, compare, what_if, t0)
    return replace(rep, side_columns=side_reports(sm.side_columns, paths), seconds=time.perf_counter() - t0)


def _read_shard(directory: str, path: str, name: str, cols: list[str], parts: dict, locations: list) -> None:
    """Append one shard's small columns to `parts` (never input_ids)."""
    import pyarrow.parquet as pq
    from packtool.storage import arrow_file, is_file
    if not is_file(path):
        raise InspectError(f"{path}: listed in the manifest but missing; run `packtool verify {directory}`")
    try:
        t = pq.read_table(arrow_file(path), columns=cols)
    except (OSError, ValueError, KeyError, TypeError) as e:  # pyarrow: damaged or not a shard
        raise InspectError(f"{path}: cannot be read as a slab shard ({' '.join(str(e).split())[:200]}); "
                           f"run `packtool verify {directory}`") from None
    src_arr = t.column("source_index").combine_chunks()
    src = src_arr.values.to_numpy()
    real = src >= 0  # fill segments are layout, not content
    per_row = np.diff(src_arr.offsets.to_numpy())
    row_of = np.repeat(np.arange(t.num_rows), per_row)
    parts["len"].append(t.column("seq_lens").combine_chunks().values.to_numpy()[real])
    parts["src"].append(src[real])
    parts["chunk"].append(t.column("chunk_index").combine_chunks().values.to_numpy()[real])
    parts["nseg"].append(np.bincount(row_of[real], minlength=t.num_rows))
    for k, c in (("loss", "num_loss_tokens"), ("single", "singleton"), ("rank", "dp_rank"), ("step", "step")):
        parts[k].append(t.column(c).to_numpy())
    for c in ("layout_pad", "tail_pad", "fill_pad"):
        parts[c].append(t.column(c).to_numpy().astype(np.int64))
    locations += [f"{name} row {r}" for r in range(t.num_rows)]


def _check_stored_layout(sm, cat: dict, ovf_of) -> None:
    """The figures inspect reports come from the slabs' seq_lens under the manifest's settings:
    they must be the layout the slabs hold, and the manifest's overflow counts theirs."""
    from packtool.slabs.format import FormatError
    a = sm.alignment
    offsets = np.concatenate(([0], np.cumsum(cat["nseg"]))).astype(np.int64)
    if offsets.size < 2:
        return
    lay = compute_layout(cat["len"].astype(np.int64), offsets, a)
    over = (lay.footprint > a.usable) & ~cat["single"].astype(bool)
    for name, want, got in (("layout_pad", lay.layout_pad, cat["layout_pad"]), ("tail_pad", lay.tail_pad, cat["tail_pad"]),
                            ("fill_pad", lay.fill, cat["fill_pad"]), ("capacity", np.where(over, 1, 0), 0)):
        bad = np.flatnonzero(want != got)
        if bad.size:
            raise FormatError(f"{sm.path}: slab {int(bad[0])}'s {name} is not the layout of its seq_lens under the "
                              f"manifest's {a.describe()} C={a.capacity}; run `packtool verify {sm.path}`")
    st = (sm.raw.get("stats") or {}).get("overflow") or {}
    got = ovf_of()
    for k in ("sequences", "chunks"):
        if k in st and sm.packing.overflow == "split" and st[k] != getattr(got, k):
            raise FormatError(f"{sm.manifest}: stats.overflow.{k} is {st[k]}, the slabs give {getattr(got, k)}; "
                              f"run `packtool verify {sm.path}`")


def _reassemble(source: np.ndarray, seg_len: np.ndarray) -> np.ndarray:
    """Length of each source row: the sum of its segments (its chunks when split)."""
    if source.size == 0:
        return np.zeros(0, np.int64)
    return np.bincount(source, weights=seg_len, minlength=int(source.max()) + 1).astype(np.int64)


def _overflow_from_chunks(src, chunk, policy: str, singletons: int) -> OverflowStats:
    n_chunks = np.bincount(src[chunk >= 0]) if src.size else np.zeros(0, np.int64)
    split = n_chunks > 1
    if policy == "split":
        return OverflowStats(policy, int(split.sum()), int(n_chunks[split].sum()),
                             int((n_chunks[split] - 1).sum()), 0, 0)
    return OverflowStats(policy, singletons if policy == "singleton" else 0, singletons=singletons)


# --- the report --------------------------------------------------------------------------

def build_report(kind: str, path: str | None, ss: SlabSet, compare: bool = False,
                 what_if: bool = True, t0: float | None = None) -> InspectReport:
    import time
    t0 = time.perf_counter() if t0 is None else t0
    a = ss.alignment
    lay = compute_layout(ss.seg_len, ss.slab_offsets, a)
    pad = padding_stats(lay, a, ss.singleton)
    real_per_slab = np.add.reduceat(ss.seg_len, ss.slab_offsets[:-1]) if lay.n_bins else np.zeros(0, np.int64)
    lb, l2 = a.lower_bound(ss.seg_len), a.l2_bound(ss.seg_len)
    cap = pad.capacity_tokens
    from packtool.inspection.compare import compare_rows, what_if_capacity
    rep = InspectReport(
        kind=kind, path=path,
        alignment=dict(tp=a.tp, cp=a.cp, sp=a.sp, fp8=a.fp8, capacity=a.capacity,
                       fixed_length=a.fixed_length, convention=a.convention, s=a.s, t=a.t, usable=a.usable),
        packing=asdict(ss.packing), sequences=ss.num_sequences, segments=int(ss.seg_len.size),
        slabs=lay.n_bins, real_tokens=pad.real_tokens,
        loss_tokens=None if ss.loss_tokens is None else int(ss.loss_tokens.sum()),
        physical_tokens=pad.physical_tokens, capacity_tokens=cap, lower_bound=lb, l2_bound=l2,
        excess_over_bound=lay.n_bins - max(lb, l2), efficiency=pad.efficiency,
        waste=(cap - pad.real_tokens) / cap if cap else 0.0, padding=pad, overflow=ss.overflow,
        fill_histogram=_fill_histogram(real_per_slab[~ss.singleton], a.usable),
        length_histogram=_length_histogram(ss.source_lengths),
        dp=_dp_report(ss, lay, real_per_slab), worst_slabs=_worst(ss, lay, real_per_slab),
        compare=compare_rows(ss) if compare else [],
        what_if=what_if_capacity(ss, pad) if what_if else None)
    return _with_seconds(rep, time.perf_counter() - t0)


def _with_seconds(rep: InspectReport, s: float) -> InspectReport:
    from dataclasses import replace
    return replace(rep, seconds=s)


def _fill_histogram(real: np.ndarray, usable: int) -> Histogram:
    edges = np.linspace(0.0, 1.0, FILL_BINS + 1)
    counts = np.histogram(np.minimum(real / usable, 1.0), bins=edges)[0] if real.size else np.zeros(FILL_BINS, int)
    return Histogram([round(float(e), 4) for e in edges], [int(c) for c in counts], "fraction of U")


def _length_histogram(lengths: np.ndarray) -> Histogram:
    """Power-of-two bins [1,2), [2,4), ... up to the longest sequence: SFT lengths are long-tailed."""
    top = int(lengths.max()) if lengths.size else 1
    k = max(1, int(np.ceil(np.log2(top + 1))))
    edges = 2 ** np.arange(k + 1)
    counts = np.histogram(lengths, bins=edges)[0] if lengths.size else np.zeros(k, int)
    return Histogram([int(e) for e in edges], [int(c) for c in counts], "tokens")


def _dp_report(ss: SlabSet, lay, real_per_slab: np.ndarray) -> DpReport:
    a = ss.alignment
    dp = int(ss.packing.dp)
    slab_of = np.repeat(np.arange(lay.n_bins), np.diff(ss.slab_offsets))
    cost = np.bincount(slab_of, weights=a.seq_footprint(ss.seg_len) + ATTN_COEF * ss.seg_len.astype(float) ** 2,
                       minlength=lay.n_bins)
    rank = np.asarray(ss.dp_rank, np.int64)
    n_ranks = max(dp, int(rank.max()) + 1 if rank.size else 1)
    loads = [RankLoad(r, int((rank == r).sum()), int(real_per_slab[rank == r].sum()),
                      int(lay.slab_len[rank == r].sum()), float(cost[rank == r].sum())) for r in range(n_ranks)]
    imb = lambda x: float((x.max() - x.mean()) / x.mean()) if x.size and x.mean() > 0 else 0.0  # noqa: E731
    step = np.asarray(ss.step, np.int64)
    steps = []
    if dp > 1 and step.size:
        per = np.zeros((int(step.max()) + 1, n_ranks))
        np.add.at(per, (step, rank), cost)
        steps = [imb(row) for row in per if row.sum() > 0]
    return DpReport(dp, loads, imb(np.array([x.real_tokens for x in loads], float)),
                    imb(np.array([x.compute for x in loads])), float(np.mean(steps)) if steps else 0.0)


def _worst(ss: SlabSet, lay, real_per_slab: np.ndarray) -> list[SlabLoad]:
    """Slabs that waste the most: unused capacity plus padding (physical - real for singletons)."""
    U = ss.alignment.usable
    waste = np.where(ss.singleton, lay.slab_len - real_per_slab, np.maximum(U, lay.slab_len) - real_per_slab)
    order = np.lexsort((np.arange(waste.size), -waste))[:WORST]
    out = []
    for b in order:
        b = int(b)
        out.append(SlabLoad(
            slab=b, location=ss.locations[b] if ss.locations else f"slab {b}",
            segments=int(ss.slab_offsets[b + 1] - ss.slab_offsets[b]), real_tokens=int(real_per_slab[b]),
            physical_tokens=int(lay.slab_len[b]), layout_pad=int(lay.layout_pad[b]),
            tail_pad=int(lay.tail_pad[b]), fill_pad=int(lay.fill[b]),
            slack=0 if ss.singleton[b] else int(max(U - lay.slab_len[b], 0)),
            fill=float(real_per_slab[b] / U), singleton=bool(ss.singleton[b])))
    return out
