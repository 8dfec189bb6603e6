"""Planning: lengths in, slabs out (which segment goes where), before any token moves.

`plan()` applies the overflow policy, asks `packers` to place footprints, optionally assigns
slabs to DP ranks and steps, shuffles slab order by seed and computes the layout through
`layout.compute_layout`. Everything downstream (writer, inspect, verify) reads a `Plan`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from typing import Callable

import numpy as np

from packtool.align import Alignment
from packtool.errors import PacktoolConfigError, arg, bad_choice
from packtool.integers import int_array
from packtool.layout import Layout, compute_layout
from packtool import packers
from packtool.packers import ALGORITHMS
from packtool.params import check_fields, expect
from packtool.progress import compile_seconds, kernel_seconds

OVERFLOW_POLICIES = ("error", "singleton", "truncate", "split")
# docs/DESIGN.md §3: strict packers refuse by default; mffd/balanced keep the seed's soft cap.
DEFAULT_OVERFLOW = {"ffd": "error", "bfd": "error", "mffd": "singleton", "balanced": "singleton"}


class PlanError(PacktoolConfigError):
    """A plan cannot be made as asked; the message names the row and the flag that fixes it."""


class SequenceError(PlanError):
    """One sequence cannot be planned: `sequence` is its index in the planned lengths (a
    tokenized cache's row), `detail` the message without it, so that a caller who knows where
    the row came from (packing: the file and its row) can name that instead."""

    def __init__(self, sequence: int, detail: str) -> None:
        super().__init__(f"sequence {sequence} has {detail}")
        self.sequence, self.detail = sequence, detail

    def __reduce__(self):
        # rebuilt from its own fields when a Ray plan task sends it back (the default pickles
        # args=(message,), which this __init__ cannot take: Ray said "Failed to deserialize")
        return (type(self), (self.sequence, self.detail))


@dataclass(frozen=True)
class PackingConfig:
    algorithm: str = "bfd"
    overflow: str | None = None  # None: the algorithm's default
    dp: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise bad_choice(PlanError, "algorithm", self.algorithm, ALGORITHMS)
        pol = self.overflow or DEFAULT_OVERFLOW[self.algorithm]
        if pol not in OVERFLOW_POLICIES:
            raise bad_choice(PlanError, "overflow", pol, OVERFLOW_POLICIES)
        object.__setattr__(self, "overflow", pol)
        check_fields(self, "dp", "seed", error=PlanError)  # numpy ints become int (JSON in a manifest)


def too_long_fix(align: Alignment) -> str:
    """The fix for a sequence over the slab, in the caller's words (errors.arg): the argument
    that sets the slab's room (--fixed-length when given, not --max-tokens) or the policy."""
    return f"{align.raise_usable()} or use {arg('overflow', choices=('split', 'truncate', 'singleton'))}"


@dataclass(frozen=True)
class FirstTooLong:
    """`--overflow error`'s refusal said while tokenizing, at the first row whose footprint
    exceeds the slab, not after every input is tokenized. Called per tokenized batch with its
    lengths, its dropped rows (empty/all-masked: never planned), its file and first file row;
    a plain dataclass so Ray's tokenize tasks get it pickled."""
    align: Alignment
    stopped: str = "the rest was not tokenized"
    # spelled where it is made: the check may run in another process (a Ray task)
    fix: str = ""

    def __post_init__(self) -> None:
        if not self.fix:
            object.__setattr__(self, "fix", too_long_fix(self.align))

    def __call__(self, lengths: np.ndarray, dropped: np.ndarray, path: str, first_row: int) -> None:
        fp = self.align.seq_footprint(lengths)
        over = np.flatnonzero((fp > self.align.usable) & ~dropped)
        if over.size:
            r = int(over[0])
            raise PlanError(f"{int(lengths[r])} tokens; aligned footprint {int(fp[r])} exceeds capacity "
                            f"{self.align.usable} (the first such row; {self.stopped}): {self.fix}",
                            path=path, row=first_row + r)


def first_too_long(align: Alignment, packing: PackingConfig | None, **kw) -> FirstTooLong | None:
    """The early refusal when the policy is `error` (None otherwise)."""
    return FirstTooLong(align, **kw) if (packing or PackingConfig()).overflow == "error" else None


def config_dict(a: Alignment, pk: PackingConfig) -> dict:
    """The settings as manifests and plan files record them (s, t, usable: derived, kept so a
    reader can check that its packtool derives the same)."""
    return {"alignment": dict(tp=a.tp, cp=a.cp, sp=a.sp, fp8=a.fp8, capacity=a.capacity,
                              fixed_length=a.fixed_length, convention=a.convention,
                              s=a.s, t=a.t, usable=a.usable),
            "packing": dict(algorithm=pk.algorithm, overflow=pk.overflow, dp=pk.dp, seed=pk.seed)}


def config_from_dict(cfg: dict) -> tuple[Alignment, PackingConfig]:
    """Inverse of `config_dict` (older records: no fixed_length, overflow, dp or seed). Raises
    KeyError/TypeError/ValueError/AlignmentError/PlanError for the caller to name its file."""
    a, pk = cfg["alignment"], cfg["packing"]
    align = Alignment(tp=a["tp"], cp=a["cp"], sp=a["sp"], fp8=a["fp8"], capacity=a["capacity"],
                      fixed_length=a.get("fixed_length"), convention=a["convention"])
    return align, PackingConfig(algorithm=pk["algorithm"], overflow=pk.get("overflow"),
                                dp=pk.get("dp", 1), seed=pk.get("seed", 0))


@dataclass(frozen=True)
class OverflowStats:
    policy: str
    # sequences whose footprint exceeds the usable capacity; None (with tokens_dropped): not known,
    # a truncate plan file written before plan files recorded it (inspection.planned._truncated)
    sequences: int | None = 0
    chunks: int = 0  # segments produced from them (split)
    # the loss tokens a cut took: split, the targets among the chunks' first tokens (at most one
    # per cut); truncate, those cut away. Both from the loss masks (MASK_FIGURES): 0 from lengths
    targets_lost: int = 0
    tokens_dropped: int | None = 0  # truncate
    singletons: int = 0
    untrained: int = 0  # truncate: sequences cut to no target at all (absent in older manifests)


# The one set of names a segment goes by from plan to writer (docs/DESIGN.md, "Segments"):
# `Segments`, the sharded `Placement`, the `Routing` to output shards and the spilled
# `slabs.routed.SEGMENT` records all use them, as do the slab columns they become
# (source_index, source_offset, seq_lens, chunk_index).
SEGMENT_FIELDS = ("source", "offset", "length", "chunk")


@dataclass(frozen=True)
class Segments:
    """Items to place after the overflow policy: a whole sequence or a chunk of one."""

    source: np.ndarray  # int64 source row (tokenized cache row)
    offset: np.ndarray  # int64 first token inside the source row
    length: np.ndarray  # int64 real tokens
    chunk: np.ndarray  # int32 chunk number (0 for whole sequences)
    singleton: np.ndarray  # bool: placed alone, footprint > U

    def take(self, idx: np.ndarray) -> "Segments":
        return Segments(*(getattr(self, f)[idx] for f in (*SEGMENT_FIELDS, "singleton")))


@dataclass(frozen=True)
class Plan:
    alignment: Alignment
    packing: PackingConfig
    num_sequences: int
    # segments in on-disk order: slab b holds segments.*[slab_offsets[b]:slab_offsets[b+1]]
    segments: Segments
    slab_offsets: np.ndarray
    singleton: np.ndarray  # bool per slab
    slab_index: np.ndarray  # int64 per slab: plan order before the seeded shuffle
    dp_rank: np.ndarray
    step: np.ndarray
    microbatch: np.ndarray
    layout: Layout
    overflow: OverflowStats
    lower_bound: int
    l2_bound: int
    dp_imbalance: float
    dp_moved: int
    seconds: float = field(compare=False)  # planning only: kernel compiles are apart
    compile_seconds: float = field(default=0.0, compare=False)  # numba compiles (first run)
    load_seconds: float = field(default=0.0, compare=False)  # kernels loaded from numba's cache

    @property
    def num_slabs(self) -> int:
        return self.slab_offsets.size - 1


# Per overflow policy, the `OverflowStats` figures `apply_overflow` can make non-zero (every
# other figure stays 0 under it). Kept beside the function so that a policy's bookkeeping has
# one owner: verify holds a manifest's stats.overflow to it (verification/declared.py), and
# tests/planning/test_overflow_figures.py runs apply_overflow to hold this to the function.
OVERFLOW_FIGURES = {"error": (), "singleton": ("sequences", "singletons"),
                    "truncate": ("sequences", "tokens_dropped", "targets_lost", "untrained"),
                    "split": ("sequences", "chunks", "targets_lost")}
# Of those, the figures the loss masks hold and the lengths do not: apply_overflow leaves them 0,
# pack counts them from the tokenized rows (planning.cut_targets, summary.with_cache) and
# `verify --source` from the source; a plan of lengths alone says them unknown (S44-3). Split's
# targets lost are the targets among its chunks' first tokens, not one per cut (L6): a cut
# inside a prompt loses none.
MASK_FIGURES = {"truncate": ("targets_lost", "untrained"), "split": ("targets_lost",)}


def mask_figure_bounds(counted: OverflowStats) -> dict[str, int]:
    """The most each of MASK_FIGURES' figures can be, from what the segments hold
    (`overflow_of_segments`): a split loses at most one target per cut. `verify` without the
    source and `inspect` of an output hold the manifest's figures to these."""
    if counted.policy == "split":
        return {"targets_lost": counted.chunks - counted.sequences}
    return {}


def overflow_off_policy(recorded: dict, policy: str) -> list[tuple[str, object, object]]:
    """(key, expected, found) for each figure of a recorded overflow block (a manifest's
    `stats.overflow`) that `policy` cannot produce: another policy named, or a figure outside
    `OVERFLOW_FIGURES[policy]` not 0. `verify` reports each; `inspect`, which shows the block,
    refuses the first (S41-11): an edited block is never shown as what pack did."""
    out: list[tuple[str, object, object]] = []
    if "policy" in recorded and recorded["policy"] != policy:
        out.append(("policy", policy, recorded["policy"]))
    allowed = OVERFLOW_FIGURES[policy]
    out += [(k, 0, recorded[k]) for k in (f.name for f in fields(OverflowStats) if f.name != "policy")
            if k not in allowed and recorded.get(k)]
    return out


def overflow_of_segments(source: np.ndarray, chunk: np.ndarray, policy: str,
                         singletons: int) -> OverflowStats | None:
    """The `OverflowStats` that `apply_overflow` recorded, counted again from what it made: the
    real segments' source rows and chunk numbers and the slabs placed alone (`inspect` of a plan
    file, or of an output, whose manifest's figures it holds to them). Only
    `OVERFLOW_FIGURES[policy]` can be non-zero, MASK_FIGURES' stay 0 (`mask_figure_bounds`
    bounds them). None under truncate, whose figures the segments do not hold (a cut row looks
    like a row of U tokens)."""
    if "tokens_dropped" in OVERFLOW_FIGURES[policy]:  # what a cut removed is in no segment
        return None
    n_chunks = np.bincount(source[chunk >= 0]) if source.size else np.zeros(0, np.int64)
    cut = n_chunks > 1
    over = {"split": int(cut.sum()), "singleton": singletons}.get(policy, 0)
    made = {"sequences": over, "chunks": int(n_chunks[cut].sum()), "singletons": singletons}
    return OverflowStats(policy, **{k: v for k, v in made.items() if k in OVERFLOW_FIGURES[policy]})


def segments_off_policy(source: np.ndarray, chunk: np.ndarray, length: np.ndarray, singletons: np.ndarray,
                        policy: str, usable: int) -> tuple[str, int, str] | None:
    """What the real segments (source row, chunk number, length of each) and the slabs placed
    alone (`singletons`, a bool per slab) hold that `apply_overflow` under `policy` cannot have
    made, as ("segment" or "slab", its index, why), or None: a row cut into chunks under any
    policy but split; a slab placed alone (a segment over U) under any but singleton; under
    split, a chunk other than its row's last that is not U tokens (rows are cut into chunks of
    U). `inspect` of a plan file or an output refuses the first: settings edited against their
    rows would make every overflow figure a lie (S42-9)."""
    cut = np.flatnonzero(chunk > 0)
    if policy != "split" and cut.size:
        i = int(cut[0])
        return "segment", i, (f"is chunk {int(chunk[i])} of source row {int(source[i])}, but overflow "
                              f"{policy!r} cuts no row (only 'split' does)")
    alone = np.flatnonzero(singletons)
    if policy != "singleton" and alone.size:
        return "slab", int(alone[0]), (f"is a sequence over U={usable:,} placed alone, which overflow {policy!r} "
                                       f"never makes (only 'singleton' does)")
    if policy == "split" and cut.size:
        order = np.lexsort((chunk, source))
        s, ln = source[order], length[order]
        short = np.flatnonzero((s[:-1] == s[1:]) & (ln[:-1] != usable))  # a chunk with one after it
        if short.size:
            i = int(order[short[0]])
            return "segment", i, (f"is chunk {int(chunk[i])} of source row {int(source[i])} with {int(length[i]):,} "
                                  f"tokens, but overflow 'split' cuts a row into chunks of U={usable:,} tokens "
                                  f"(all but its last)")
    return None


def apply_overflow(lengths: np.ndarray, align: Alignment, policy: str,
                   first_row: int = 0) -> tuple[Segments, OverflowStats]:
    """Segments of `lengths` under the overflow policy; sources are numbered from `first_row`
    (a length shard of a larger input), and so are the rows errors name."""
    lengths = np.asarray(lengths, np.int64)
    if lengths.size and lengths.min() < 1:
        bad = int(np.flatnonzero(lengths < 1)[0])
        raise SequenceError(first_row + bad, f"{int(lengths[bad])} tokens: every sequence needs at least 1")
    U = align.usable
    over = align.seq_footprint(lengths) > U
    n_over = int(over.sum())
    idx = np.arange(first_row, first_row + lengths.size, dtype=np.int64)
    zeros = np.zeros(lengths.size, np.int64)
    if n_over and policy == "singleton" and align.fixed_length is not None:
        i = int(np.flatnonzero(over)[0])
        raise SequenceError(
            first_row + i, f"{int(lengths[i])} tokens; aligned footprint {int(align.seq_footprint(lengths[i]))} "
            f"exceeds the fixed length {U} ({n_over} such sequence{'s' if n_over != 1 else ''}), and a "
            f"slab of its own would be longer than {arg('fixed_length')} promises every slab is: use "
            f"{arg('overflow', choices=('split', 'truncate'))}, or {align.raise_usable()}")
    if n_over == 0 or policy == "singleton":
        segs = Segments(idx, zeros, lengths, zeros.astype(np.int32), over)
        return segs, OverflowStats(policy, n_over, singletons=n_over if policy == "singleton" else 0)
    if policy == "error":
        i = int(np.flatnonzero(over)[0])
        raise SequenceError(
            first_row + i, f"{int(lengths[i])} tokens; aligned footprint "
            f"{int(align.seq_footprint(lengths[i]))} exceeds capacity {U} ({n_over} such "
            f"sequence{'s' if n_over != 1 else ''}): {too_long_fix(align)}")
    if policy == "truncate":
        new = np.minimum(lengths, U)  # U is a multiple of s, so the footprint is U
        st = OverflowStats(policy, n_over, tokens_dropped=int((lengths - new).sum()))
        return Segments(idx, zeros, new, zeros.astype(np.int32), np.zeros(lengths.size, bool)), st
    # split: chunks of U tokens (U is a multiple of s); each boundary loses its token's target,
    # if it is one: the loss masks say (MASK_FIGURES)
    n_chunks = np.where(over, -(-lengths // U), 1)
    from packtool.planning.bounds import check_split
    check_split(int(n_chunks.sum()), align, int(lengths.max()))
    row = np.repeat(np.arange(lengths.size), n_chunks)
    first = np.concatenate(([0], np.cumsum(n_chunks)[:-1]))
    chunk = (np.arange(row.size) - np.repeat(first, n_chunks)).astype(np.int32)
    offset = chunk.astype(np.int64) * U
    length = np.minimum(lengths[row] - offset, U)
    src = idx[row]
    st = OverflowStats(policy, n_over, chunks=int(n_chunks[over].sum()))
    return Segments(src, offset, length, chunk, np.zeros(src.size, bool)), st


def plan(lengths, alignment: Alignment | None = None, packing: PackingConfig | None = None) -> Plan:
    """Place sequences of the given token lengths into slabs. See docs/DESIGN.md §2-3.
    `alignment` and `packing` default as the CLI's flags do."""
    alignment = expect(alignment, Alignment, "plan", "alignment", optional=True) or Alignment()
    packing = expect(packing, PackingConfig, "plan", "packing", optional=True) or PackingConfig()
    # the int64 cast truncated 5.7, read True as 1 and a uint64 2^64-1 as -1
    lengths = int_array(lengths, "lengths", PlanError, at=SequenceError, minimum=1)  # a sequence holds a token
    from packtool.planning.bounds import check_capacity
    check_capacity(alignment)
    return plan_with(lengths, alignment, packing,
                     lambda fp: packers.pack_items(fp, alignment.usable, packing.algorithm))


def plan_with(lengths, alignment: Alignment, packing: PackingConfig,
              pack_fn: Callable[[np.ndarray], np.ndarray]) -> Plan:
    """`plan`, with the placement of the footprints that fit given by `pack_fn(footprints)
    -> bin id per item` (sharded planning passes its own); everything else is shared."""
    t0, c0 = time.perf_counter(), (compile_seconds(), kernel_seconds())
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    segs, ovf = apply_overflow(lengths, alignment, packing.overflow)
    fp = alignment.seq_footprint(segs.length)
    fits = ~segs.singleton
    bin_of = np.empty(segs.length.size, np.int64)
    n_packed = 0
    if fits.any():
        bin_of[fits] = pack_fn(fp[fits])
        n_packed = int(bin_of[fits].max()) + 1
    bin_of[~fits] = n_packed + np.arange(int((~fits).sum()))
    n_bins = int(bin_of.max()) + 1 if bin_of.size else 0
    rank = np.zeros(n_bins, np.int32)
    step = np.arange(n_bins, dtype=np.int32)
    imbalance, moved = 0.0, 0
    if packing.dp > 1:
        cap = max(alignment.usable, int(fp.max()))
        dpa = packers.assign_dp(bin_of, fp, segs.length, cap, packing.dp)
        bin_of, rank, step = dpa.bin_of_item, dpa.rank, dpa.step
        imbalance, moved = float(dpa.imbalance), int(dpa.moved_items)
        n_bins = rank.size
    order_bins, steps_sorted = slab_order(rank, step, packing)
    new_id = np.empty(n_bins, np.int64)
    new_id[order_bins] = np.arange(n_bins)
    slab_of = new_id[bin_of]
    seg_order = np.argsort(slab_of, kind="stable")  # within a slab: input order
    counts = np.bincount(slab_of, minlength=n_bins)
    slab_offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    placed = segs.take(seg_order)
    single = np.zeros(n_bins, bool)
    single[slab_of[~fits]] = True
    lay = compute_layout(placed.length, slab_offsets, alignment)
    return Plan(
        alignment=alignment, packing=packing, num_sequences=int(lengths.size),
        segments=placed, slab_offsets=slab_offsets, singleton=single,
        slab_index=order_bins.astype(np.int64), dp_rank=rank[order_bins].astype(np.int32),
        step=np.asarray(steps_sorted, np.int32), microbatch=np.zeros(n_bins, np.int32),
        layout=lay, overflow=ovf, lower_bound=alignment.lower_bound(segs.length),
        l2_bound=alignment.l2_bound(segs.length), dp_imbalance=imbalance, dp_moved=moved,
        **planning_seconds(t0, c0))


def planning_seconds(t0: float, c0: tuple[float, float]) -> dict:
    """A plan's `seconds` since `t0` without the kernel compiles and cache loads since `c0`
    (`compile_seconds()`, `kernel_seconds()`): a first run's numba compile, or a process's
    first load of the kernels, is not planning; they are reported apart."""
    compiled, kernels = compile_seconds() - c0[0], kernel_seconds() - c0[1]
    return {"seconds": max(time.perf_counter() - t0 - kernels, 0.0), "compile_seconds": compiled,
            "load_seconds": max(kernels - compiled, 0.0)}


def slab_order(rank: np.ndarray, step: np.ndarray, packing: PackingConfig) -> tuple[np.ndarray, np.ndarray]:
    """On-disk slab order (bin ids in disk order) and the step of each slab in that order.
    A seeded shuffle, never sorted by length; with DP, whole steps are shuffled, each step's
    slabs stay together in rank order, and steps are renumbered in disk order so consumers
    read them in sequence. Per bin only: sharded planning calls it on the driver too."""
    rng = np.random.default_rng(packing.seed)
    if packing.dp <= 1:
        order = rng.permutation(rank.size)
        return order, step[order]
    perm = rng.permutation(int(step.max()) + 1)
    order = np.lexsort((rank, perm[step]))
    steps = step[order]
    return order, np.cumsum(np.concatenate(([0], np.diff(steps) != 0)))
