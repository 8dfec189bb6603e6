"""`inspect` of a packed output (`inspect_packed`): its report from what the reader's checks
read (their layout checks hold every slab's pads and capacity to what the report recomputes),
and the check that the manifest's overflow counts are the slabs' (the report shows them).
"""
from __future__ import annotations

import numpy as np

from packtool.inspection.report import InspectReport, SlabSet, build_report, reassemble
from packtool.params import arguments
from packtool.planning.core import (MASK_FIGURES, OVERFLOW_FIGURES, OverflowStats, mask_figure_bounds,
                                   overflow_of_segments, overflow_off_policy)


def inspect_packed(directory: str, compare: bool = False, what_if: bool = True,
                   progress: bool = False, given: dict | None = None) -> InspectReport:
    """Reports from the small columns of each shard, after every check a reader makes
    (`slabs.reader.check_rows`: the open checks, each shard's checksum, every row group's
    layout, pads, loss flags and token ids): a report is never clean on an output a training
    run would refuse (FORMAT.md, "What a reader checks"). The figures come from the columns
    those checks read, so no column is read twice. An output replaced while it is read (a `pack
    --overwrite` of the folder) is one line, as verify's (output.unchanged): never a report
    mixing the old manifest with the new shards, nor a reader's error about good shards."""
    from packtool.output.unchanged import check_unchanged, folder_state
    before = folder_state(directory)
    try:
        report = _report(directory, compare, what_if, progress, given)
    except Exception:  # a shard gone or cut mid-swap (FileNotFoundError, Arrow's) is the swap too
        check_unchanged(directory, before, "inspect")  # a folder gone mid-swap is the swap, not a bad argument
        raise
    check_unchanged(directory, before, "inspect")
    return report


def _report(directory, compare: bool, what_if: bool, progress: bool, given: dict | None) -> InspectReport:
    import time

    from packtool.slabs.format import SlabManifest
    from packtool.slabs.reader import check_rows
    t0 = time.perf_counter()
    directory, compare, what_if, progress = arguments(directory=directory, compare=compare, what_if=what_if,
                                                      progress=progress)
    sm = SlabManifest.read(directory, "directory")
    man, align, packing = sm.raw, sm.alignment, sm.packing
    if given:  # typed planning flags (capacity, tp, ..., seed by name): the manifest's, or refused
        from packtool.inspection.planned import held_to_record
        held_to_record(directory, align, packing, given, "the output's manifest")
    from packtool.progress import bar, large
    paths = [sm.shard_path(i) for i in range(len(sm.shards))]
    from packtool.inspection.side import SideTally
    side = SideTally(sm.side_columns)
    with bar("Reading", len(paths), "shards", progress and large(paths)) as advance:
        index, read = check_rows(sm, extra=("singleton",), advance=advance,
                                 each_group=side.add if side.side else None)
    cat = _small_columns(index, read)
    counted = overflow_of_segments(cat["src"], cat["chunk"], packing.overflow, int(cat["single"].sum()))
    _check_overflow(sm, counted)
    seg_len = cat["len"].astype(np.int64)
    offsets = np.concatenate(([0], np.cumsum(cat["nseg"]))).astype(np.int64)
    st = man["stats"]["overflow"]  # every key there (but slabs.fields.LATER_COUNTS, absent in older outputs)
    ovf = OverflowStats(**{k: st.get(k, 0) for k in OverflowStats.__dataclass_fields__})  # truncate's: the manifest's alone
    src_len = reassemble(cat["src"].astype(np.int64), seg_len)
    ss = SlabSet(align, packing, seg_len, offsets, cat["single"].astype(bool), cat["rank"], cat["step"],
                 ovf, man["stats"]["sequences"], src_len,
                 cat["loss"].astype(np.int64), _locations(sm, index))
    from dataclasses import replace
    rep = build_report("packed", directory, ss, compare, what_if, t0)
    return replace(rep, side_columns=side.reports(), seconds=time.perf_counter() - t0)


def _small_columns(index, read: dict) -> dict:
    """The report's columns from what `check_rows` read: the real segments (fill segments are
    layout, not content) and each slab's scalars."""
    src = read["source_index"]
    real = src >= 0
    n = len(index)
    row_of = np.repeat(np.arange(n), np.diff(read["segments"]))
    return {"len": read["seq_lens"][real], "src": src[real], "chunk": read["chunk_index"][real],
            "nseg": np.bincount(row_of[real], minlength=n), "loss": read["num_loss_tokens"],
            "single": read["singleton"], "rank": read["dp_rank"], "step": read["step"],
            "layout_pad": read["layout_pad"], "tail_pad": read["tail_pad"], "fill_pad": read["fill_pad"]}


def _locations(sm, index) -> list[str]:
    """Each slab's "shard row", its row counted over the shard's row groups."""
    first = np.searchsorted(index.shard, index.shard, side="left")  # the index is in on-disk order
    row = np.arange(len(index)) - first
    return [f"{sm.shards[int(s)]} row {int(r)}" for s, r in zip(index.shard, row)]


def _check_overflow(sm, counted: OverflowStats | None) -> None:
    """The manifest's overflow counts that the report shows must be the slabs' where the slabs
    hold them (planning's `overflow_of_segments`; the layout of every slab, its pads and capacity,
    are the reader's checks, `check_rows`)."""
    from packtool.slabs.format import FormatError
    st = sm.raw["stats"]["overflow"]
    off = overflow_off_policy(st, sm.packing.overflow)  # figures no slab can tell: the policy's rule
    if off:
        k, want, got = off[0]
        raise FormatError(f"{sm.manifest}: stats.overflow.{k} is {got!r}, impossible under overflow policy "
                          f"{sm.packing.overflow!r} (config.packing.overflow; expected {want!r}): the manifest "
                          f"was edited; run `packtool verify {sm.path}`")
    if counted is None:
        return
    masks = MASK_FIGURES.get(sm.packing.overflow, ())  # the loss masks' figures: the slabs bound them
    for k in OVERFLOW_FIGURES[sm.packing.overflow]:
        if k not in masks and st[k] != getattr(counted, k):
            raise FormatError(f"{sm.manifest}: stats.overflow.{k} is {st[k]}, the slabs give {getattr(counted, k)}; "
                              f"run `packtool verify {sm.path}`")
    for k, most in mask_figure_bounds(counted).items():
        if st[k] > most:
            raise FormatError(f"{sm.manifest}: stats.overflow.{k} is {st[k]}, more than the slabs' {most} cut(s) "
                              f"can lose (one target each at most); run `packtool verify {sm.path}`")
