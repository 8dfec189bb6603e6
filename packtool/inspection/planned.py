"""`inspect` of a plan before packing: a list of lengths (`inspect_lengths`) or a plan Parquet
written by `packtool plan --output` (`inspect_plan_file`), with the settings it was made with.
"""
from __future__ import annotations

import os

import numpy as np

from packtool.align import Alignment
from packtool.errors import arg, cli_flag
from packtool.inspection.report import (
    InspectError,
    InspectReport,
    SlabSet,
    build_report,
    reassemble,
)
from packtool.arrays import first_null
from packtool.integers import int_array
from packtool.layout import compute_layout
from packtool.params import arguments, expect
from packtool.planning.core import (OverflowStats, PackingConfig, Plan, PlanError, SequenceError, overflow_of_segments,
                                    segments_off_policy)
from packtool.planning.core import plan as make_plan


def slabs_from_plan(p: Plan, source_lengths: np.ndarray | None = None) -> SlabSet:
    src_len = source_lengths if source_lengths is not None else reassemble(p.segments.source, p.segments.length)
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
    lengths = int_array(lengths, "lengths", PlanError, at=SequenceError, minimum=1)  # before an int64 cast truncates a float
    p = make_plan(lengths, alignment, packing or PackingConfig())
    return build_report("lengths", path, slabs_from_plan(p, lengths), compare, what_if, t0)


def inspect_plan_file(path: str, alignment: Alignment | None = None, packing: PackingConfig | None = None,
                      compare: bool = False, what_if: bool = True, given: dict | None = None) -> InspectReport:
    """A plan Parquet (`packtool plan --output`) records the settings it was made with; None
    uses them, settings passed must agree. An older plan file records none: pass the flags
    `plan` used. The stored padded lengths are checked against the settings either way.
    `given`: settings set one by one by name (capacity, tp, ..., seed: the flags a command line
    typed), instead of whole `alignment`/`packing`: each must agree with the file's record, and
    the ones not given are the file's (a default is no choice of the user's)."""
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
                                          "source_offset", "length", "padded", "start"])
    except (OSError, ValueError, KeyError, TypeError) as e:  # pyarrow: damaged or not a plan file
        raise InspectError(f"{path}: cannot be read as a plan file ({' '.join(str(e).split())[:200]}); "
                           f"write it with `packtool plan --output`") from None
    alignment, packing = plan_settings(path, alignment, packing, given)
    for c in t.column_names:  # a null reads back as a made-up number (-2^63)
        r = first_null(t.column(c))
        if r >= 0:
            raise InspectError(f"{path}: segment row {r}: column {c!r} holds a null; {_REWRITE}")
    col = _integer_columns(path, t)
    slab = col["slab"]
    _check_slabs(path, slab, col["dp_rank"], col["step"])
    counts = np.bincount(slab)
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    seg_len = col["length"]
    lay = compute_layout(seg_len, offsets, alignment)
    stored = col["padded"]
    # a file that records its settings was read with them: a row that disagrees was edited
    from packtool.planning.plan_file import read_plan_config
    recorded = read_plan_config(path) is not None
    fix = (_REWRITE if recorded else f"pass the same {'/'.join(arg(n) for n in ('tp', 'cp', 'sp', 'fp8', 'capacity', 'fixed_length', 'convention'))} as `plan`")
    if (seg_len < 1).any():
        i = int(np.flatnonzero(seg_len < 1)[0])
        raise InspectError(f"{path}: segment row {i} has length {int(seg_len[i])}; every segment holds at least "
                           f"one token; {_REWRITE}")
    if not np.array_equal(lay.seg_padded[~lay.is_fill], stored):
        i = int(np.flatnonzero(lay.seg_padded[~lay.is_fill] != stored)[0])
        raise InspectError(
            f"{path}: segment row {i} (length {int(seg_len[i])}) is padded to {int(stored[i])} in the file but "
            f"{int(lay.seg_padded[~lay.is_fill][i])} under {alignment.describe()} C={alignment.capacity}: {fix}")
    start = col["start"]
    if not np.array_equal(lay.seg_start[~lay.is_fill], start):  # overlapping or gapped segments
        i = int(np.flatnonzero(lay.seg_start[~lay.is_fill] != start)[0])
        raise InspectError(f"{path}: segment row {i} starts at {int(start[i])} of its slab in the file, but the "
                           f"segments before it end at {int(lay.seg_start[~lay.is_fill][i])}; {_REWRITE}")
    first = offsets[:-1]
    _check_schedule(path, col["dp_rank"][first], col["step"][first], packing.dp, recorded)
    single = (counts == 1) & (alignment.seq_footprint(seg_len[first]) > alignment.usable)
    over = np.flatnonzero(~single & (lay.footprint > alignment.usable))
    if over.size:  # the plan was made for a larger capacity: every figure would be wrong
        b = int(over[0])
        held = f"slab {b} holds {int(lay.footprint[b]):,} tokens, more than U={alignment.usable:,} of C={alignment.capacity:,}"
        if recorded:  # read with the file's own settings: no flag can make it agree
            raise InspectError(f"{path}: {held} (the file's settings); {_REWRITE}", flag=cli_flag("plan"))
        raise InspectError(
            f"{path}: {held}: the plan was made with a larger {arg(alignment.usable_arg)}; pass the same "
            f"{arg('capacity')}/{arg('fixed_length')} (and {arg('tp')}/{arg('cp')}/{arg('fp8')}/...) as `plan`",
            flag=cli_flag(alignment.usable_arg))
    src = col["source_index"]
    chunk = col["chunk_index"]
    _check_coverage(path, src, chunk, col["source_offset"], seg_len, t.schema.metadata)
    off = segments_off_policy(src, chunk, seg_len, single, packing.overflow, alignment.usable)
    if off:  # the settings say another policy than the rows were made under: its figures would lie
        kind, i, why = off
        where = f"segment row {i}" if kind == "segment" else f"slab {i}"
        raise InspectError(f"{path}: {where} {why}; " + (_REWRITE if recorded else f"pass the same "
                           f"{arg('overflow')} (and {arg('capacity')}) as `plan`"),
                           flag=cli_flag("plan" if recorded else "overflow"))
    ovf = overflow_of_segments(src, chunk, packing.overflow, int(single.sum())) or _truncated(path, packing.overflow)
    src_len = reassemble(src, seg_len)
    ss = SlabSet(alignment, packing, seg_len, offsets, single, col["dp_rank"][first],
                 col["step"][first], ovf, int(src_len.size), src_len)
    return build_report("plan", path, ss, compare, what_if, t0)


_REWRITE = "the file was edited or damaged: write it again with `packtool plan --output`"


def _truncated(path: str, policy: str) -> OverflowStats:
    """Truncate's figures, which no segment holds (a cut row looks like a row of U tokens): the
    ones `plan` recorded in the file. A file written before they were has none: the rows cut and
    the tokens dropped are unknown (null, "?"), never said as 0, and a note says why."""
    from packtool.planning.plan_file import read_plan_overflow
    rec = read_plan_overflow(path, policy)
    if rec is not None:
        return rec
    from packtool.notes import note
    note(f"{path}: written before plan files recorded truncate's figures: the rows cut and the tokens "
         f"dropped are unknown (null, '?'); write it again with `packtool plan --output` to see them")
    return OverflowStats(policy, sequences=None, tokens_dropped=None)


def _integer_columns(path: str, t) -> dict[str, np.ndarray]:
    """Each column as int64, once it holds integers that int64 holds: a float would be truncated
    without a word (1.5 tokens read as 1), text or a list fails in numpy's words."""
    import pyarrow as pa
    for c in t.column_names:
        typ = t.schema.field(c).type
        if not pa.types.is_integer(typ) or typ == pa.uint64():
            raise InspectError(f"{path}: column {c!r} holds {typ} values, a plan file's hold integers; {_REWRITE}")
    return {c: t.column(c).to_numpy().astype(np.int64) for c in t.column_names}


def _check_slabs(path: str, slab: np.ndarray, rank: np.ndarray, step: np.ndarray) -> None:
    """Rows numbered by slab 0, 1, ... in file order (write_plan's), each slab's rows of one
    dp_rank and step: a slab with no rows, a negative number or one past the rows (an edit) would
    fail in the layout's words, or size a table by it, and only a slab's first row is read."""
    if not slab.size:
        raise InspectError(f"{path}: holds no segment rows (a plan file holds one per segment); {_REWRITE}")
    prev = np.concatenate(([-1], slab[:-1]))
    bad = np.flatnonzero(np.where(np.arange(slab.size) == 0, slab != 0, (slab != prev) & (slab != prev + 1)))
    if bad.size:
        i = int(bad[0])
        after = f" after slab {int(prev[i])}" if i else ""
        raise InspectError(f"{path}: segment row {i} is in slab {int(slab[i])}{after}: slabs are numbered 0, 1, "
                           f"... in file order, each slab's rows together; {_REWRITE}")
    start = np.flatnonzero(slab != prev)
    of_slab = np.repeat(start, np.diff(np.append(start, slab.size)))  # each row's slab's first row
    for name, v in (("dp_rank", rank), ("step", step)):
        bad = np.flatnonzero(v != v[of_slab])
        if bad.size:
            i = int(bad[0])
            raise InspectError(f"{path}: segment row {i} has {name} {int(v[i])}, but row {int(of_slab[i])}, the "
                               f"first of its slab {int(slab[i])}, has {int(v[of_slab[i]])} (a slab's rows share "
                               f"it); {_REWRITE}")


def _check_schedule(path: str, rank: np.ndarray, step: np.ndarray, dp: int, recorded: bool) -> None:
    """Each slab's dp_rank and step as `plan` numbers them (planning.core.slab_order): ranks in
    0..dp-1 under the DP plan's rules (slabs.open_rules.plan_breaks, a packed output's too), steps 0, 1,
    ... in file order (without DP: each slab its own step, 0..n-1 once each). A step past them
    would size the report's per-step table by it."""
    from packtool.slabs.open_rules import plan_breaks
    fix = _REWRITE if recorded else f"pass the same {arg('dp')} as `plan`"
    found = plan_breaks(None, rank, step, np.zeros_like(step), dp)
    if found:
        raise InspectError(f"{path}: slab {found[0].slab}: {found[0].why}; {fix}")
    if dp > 1:
        bad = np.flatnonzero((np.diff(step, prepend=0) > 1) | (np.arange(step.size) == 0) & (step != 0))
        rule = "steps are numbered 0, 1, ... in file order"
    else:
        order = np.argsort(step, kind="stable")
        bad = order[np.flatnonzero(step[order] != np.arange(step.size))]
        rule = f"without DP each slab is a step of its own, 0..{step.size - 1} once each"
    if bad.size:
        b = int(bad[0])
        raise InspectError(f"{path}: slab {b} has step {int(step[b])}: {rule}; {fix}")


def _check_coverage(path: str, src: np.ndarray, chunk: np.ndarray, offset: np.ndarray, seg_len: np.ndarray,
                    meta) -> None:
    """Every source row 0..n-1 planned once, its chunks numbered 0, 1, ... and tiling the row
    (`source_offset`: each starts where the previous one ended; the rule a packed output's slabs
    are held to too: slabs.open_rules.coverage): a repeated or missing row would be reported as
    a good plan, and a chunk's offset edited would leave the sequence lengths the report shows
    (each row's chunks summed) other than the rows' own."""
    from packtool.slabs.open_rules import coverage  # here: inspecting lengths loads no slab reader
    cov = coverage(src, chunk, offset, seg_len)
    s, c = cov.source, cov.chunk
    if cov.first_break is not None:
        j, twice, want = cov.first_break
        what = "is planned twice" if twice else f"is numbered {int(c[j])}, expected {want}"
        raise InspectError(f"{path}: source row {int(s[j])} chunk {int(c[j])} {what} (segment row "
                           f"{int(cov.order[j])}); {_REWRITE}")
    if cov.first_gap is not None:
        j, want = cov.first_gap
        i = int(cov.order[j])
        raise InspectError(f"{path}: segment row {i} (source row {int(s[j])} chunk {int(c[j])}) has source_offset "
                           f"{int(offset[i])}, expected {want}: a row's chunks start at 0 and each where the one "
                           f"before it ended; {_REWRITE}")
    rows = cov.rows
    gap = np.flatnonzero(rows != np.arange(rows.size))
    if gap.size:
        j = int(gap[0])
        raise InspectError(f"{path}: source row {j} is in no segment (the rows planned run "
                           f"{int(rows[0])}..{int(rows[-1])}); {_REWRITE}")
    import json

    from packtool.planning.plan_file import META_KEY
    try:  # read_plan_config has parsed this metadata already (or there is none: an older file)
        n = json.loads((meta or {}).get(META_KEY, b"{}")).get("num_sequences")
    except (ValueError, AttributeError):
        n = None
    if isinstance(n, int) and n != rows.size:  # the last rows dropped leave no gap
        raise InspectError(f"{path}: the segments hold source rows 0..{rows.size - 1}, the file's settings say "
                           f"{n} sequences; {_REWRITE}")


ALIGNMENT_SETTINGS = ("capacity", "tp", "cp", "sp", "fp8", "fixed_length", "convention")
PACKING_SETTINGS = ("algorithm", "overflow", "dp", "seed")


def plan_settings(path: str, alignment: Alignment | None, packing: PackingConfig | None,
                  given: dict | None = None) -> tuple[Alignment, PackingConfig]:
    """The settings to read a plan file with: the ones it records, or those passed (which
    must agree with the recorded ones; `given`: see inspect_plan_file)."""
    from dataclasses import replace

    from packtool.planning.plan_file import plan_flags, read_plan_config
    if given is not None:
        unknown = sorted(set(given) - set(ALIGNMENT_SETTINGS + PACKING_SETTINGS)) if isinstance(given, dict) else [given]
        if unknown or alignment is not None or packing is not None:
            raise InspectError(f"{arg('given')} takes the settings {', '.join(ALIGNMENT_SETTINGS + PACKING_SETTINGS)} "
                               f"by name, instead of {arg('alignment')}/{arg('packing')}"
                               + (f"; not {', '.join(map(repr, unknown))}" if unknown else ""))
    ga = {k: v for k, v in (given or {}).items() if k in ALIGNMENT_SETTINGS}
    gp = {k: v for k, v in (given or {}).items() if k in PACKING_SETTINGS}
    stored = read_plan_config(path)
    if stored is None:
        if alignment is None and not given:
            raise InspectError(f"{path}: this plan file records no settings (an older packtool): "
                               f"pass the settings `plan` used ({arg('capacity')}, {arg('tp')}, {arg('cp')}, ...)")
        if given:
            return Alignment(**ga), PackingConfig(**gp)
        return alignment, packing or PackingConfig()
    sa, sp = stored
    if given is not None:
        return held_to_record(path, sa, sp, given, "the file")
    a, pk = alignment or sa, packing or sp
    differ = [k for k in ALIGNMENT_SETTINGS + PACKING_SETTINGS if _value(a, pk, k) != _value(sa, sp, k)]
    if differ:
        raise _differs(path, sa, sp, a, pk, differ, "the file")
    return sa, sp


def held_to_record(path: str, sa: Alignment, sp: PackingConfig, given: dict,
                   what: str) -> tuple[Alignment, PackingConfig]:
    """Settings typed by name (`given`) held to the ones `path` records (`what`: "the file",
    "the output's manifest"): each laid over the record (sp and overflow resolve against it,
    a value out of range refused as everywhere), one that differs refused naming it. A plan file
    and a packed output both record every setting: a flag typed with either changes nothing,
    and was ignored without a word for a packed output (S39-5)."""
    from dataclasses import replace
    ga = {k: v for k, v in given.items() if k in ALIGNMENT_SETTINGS}
    gp = {k: v for k, v in given.items() if k in PACKING_SETTINGS}
    a, pk = replace(sa, **ga), replace(sp, **gp)
    differ = [k for k in given if _value(a, pk, k) != _value(sa, sp, k)]
    if differ:
        raise _differs(path, sa, sp, a, pk, differ, what)
    return sa, sp


def _differs(path, sa, sp, a, pk, differ, what) -> InspectError:
    from packtool.planning.plan_file import plan_flags
    return InspectError(f"{path}: made with {_said(sa, sp, differ)}, but {_said(a, pk, differ)} was passed: "
                        f"{_drop(differ)} ({what} records every setting: {plan_flags(sa, sp)}) or pass the same",
                        flag=cli_flag(differ[0]))


def _value(a: Alignment, pk: PackingConfig, name: str):
    return getattr(a if name in ALIGNMENT_SETTINGS else pk, name)


_SHORT = {"capacity": "-C", "algorithm": "-a"}


def _said(a: Alignment, pk: PackingConfig, names: list[str]) -> str:
    """The settings `names` as the caller spells them: `--cp 2 --no-sp` or `cp=2, sp=False`."""
    cli = cli_flag("capacity") is not None
    out = []
    for k in names:
        v = _value(a, pk, k)
        if cli and k == "sp":  # a switch pair: its off form is a flag of its own
            out.append("--sp" if v else "--no-sp")
        elif cli and v is None:  # fixed_length unset: no flag spells it
            out.append(f"no {arg(k)}")
        elif cli and k in _SHORT:  # as plan_flags spells the record beside it in the same line
            out.append(f"{_SHORT[k]} {v}")
        else:
            out.append(arg(k, v))
    return (" " if cli else ", ").join(out)


def _drop(differ: list[str]) -> str:
    if cli_flag("capacity") is not None:
        return f"drop {'it' if len(differ) == 1 else 'them'}"
    objs = [o for o, names in (("alignment", ALIGNMENT_SETTINGS), ("packing", PACKING_SETTINGS))
            if any(k in names for k in differ)]
    return "pass " + " and ".join(f"{arg(o)}=None" for o in objs)
