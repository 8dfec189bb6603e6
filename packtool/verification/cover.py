"""`verify`, whole output: every source row exactly once (or as the overflow policy says),
and the DP fields (by the readers' rules). Works on the per-segment arrays every shard worker
returns, sorted once.
"""
from __future__ import annotations

import numpy as np

from packtool.align import Alignment
from packtool.planning.core import MASK_FIGURES, OverflowStats, mask_figure_bounds
from packtool.slabs.open_rules import DP_FIELDS, plan_breaks
from packtool.verification.problems import ProblemLog


def _where(i, segs, shard_of, names) -> dict:
    return dict(shard=names[int(shard_of[i])], row=int(segs["row"][i]), segment=int(segs["seg"][i]))


def _loc(i, segs, shard_of, names) -> str:
    w = _where(i, segs, shard_of, names)
    return f"{w['shard']} row {w['row']} segment {w['segment']}"


def check_coverage(segs: dict, shard_of: np.ndarray, names: list[str], align: Alignment, policy: str,
                   n_seq: int | None, overflow: dict, singletons: int | None, source_dir: str | None,
                   log: ProblemLog, notes: list[str], changes: dict | None = None) -> None:
    src, chunk, off, length = segs["source"], segs["chunk"], segs["offset"], segs["length"]
    order = np.lexsort((chunk, src))
    s, c, o, n = src[order], chunk[order], off[order], length[order]
    same_src = np.concatenate(([False], s[1:] == s[:-1]))[:s.size]  # no segment read: every batch skipped
    # duplicated (source, chunk): the same piece of a row twice
    dup = same_src & np.concatenate(([False], c[1:] == c[:-1]))
    for j in np.flatnonzero(dup):
        i, prev = order[j], order[j - 1]
        log.add("duplicate_segment", f"source row {int(s[j])} chunk {int(c[j])} appears twice: at "
                f"{_loc(prev, segs, shard_of, names)} and at {_loc(i, segs, shard_of, names)}",
                **_where(i, segs, shard_of, names), expected=1, found=2)
    # chunks of a row: numbered 0,1,2..., each starting where the previous one ended
    want_c = np.where(same_src, np.concatenate(([0], c[:-1] + 1)), 0)
    want_o = np.where(same_src, np.concatenate(([0], o[:-1] + n[:-1])), 0)
    gap = ~dup & ((c != want_c) | (o != want_o))
    for j in np.flatnonzero(gap):
        i = order[j]
        log.add("chunk_order", f"source row {int(s[j])} chunk {int(c[j])} starts at token {int(o[j])}; "
                f"expected chunk {int(want_c[j])} at token {int(want_o[j])} (a chunk is missing, "
                f"duplicated or misnumbered)", **_where(i, segs, shard_of, names),
                expected=int(want_o[j]), found=int(o[j]))
    rows = s[~same_src]  # s is sorted: the distinct source rows, without another sort
    if n_seq is not None:
        out = rows[(rows < 0) | (rows >= n_seq)]
        for r in out[:5]:
            i = order[np.searchsorted(s, r)]
            log.add("coverage", f"source row {int(r)} is outside the {n_seq} input sequences",
                    **_where(i, segs, shard_of, names))
        if n_seq > 4 * rows.size + (1 << 20):  # a lying stats.sequences must not size an allocation
            log.add("manifest_stats", f"the manifest's stats.sequences is {n_seq}, the slabs hold "
                    f"{rows.size} distinct source rows", expected=int(rows.size), found=int(n_seq))
            n_seq = None
    if n_seq is not None:
        present = np.zeros(n_seq, bool)
        present[rows[(rows >= 0) & (rows < n_seq)]] = True
        missing = np.flatnonzero(~present)
        if missing.size:
            shown = ", ".join(str(int(x)) for x in missing[:10])
            more = f" and {missing.size - 10} more" if missing.size > 10 else ""
            log.add("missing_sequence", f"{missing.size} source row(s) appear in no slab: {shown}{more} "
                    f"(a dropped slab row or segment)", expected=int(n_seq), found=int(n_seq - missing.size))
    # overflow accounting against the manifest
    n_chunks = np.bincount(np.searchsorted(rows, s), minlength=rows.size)
    split_rows = n_chunks > 1
    if split_rows.any() and policy != "split":
        j = int(np.flatnonzero(split_rows)[0])
        log.add("overflow", f"source row {int(rows[j])} is cut into {int(n_chunks[j])} chunks but the "
                f"overflow policy is {policy!r}")
    # singletons None: a null `singleton` leaves the count (and the singleton policy's sequences) unknown
    got = {} if singletons is None else {"singletons": singletons}
    if policy == "split":
        got.update(sequences=int(split_rows.sum()), chunks=int(n_chunks[split_rows].sum()))
    elif policy == "singleton" and singletons is not None:
        got["sequences"] = singletons
    for k, v in got.items():
        if k in overflow and overflow[k] != v:
            log.add("manifest_stats", f"the manifest's stats.overflow.{k} is {overflow[k]}, the shards give {v}",
                    expected=v, found=overflow[k])
    # the loss masks' figures: the shards bound them (a first token's target is gone from them); the source counts them
    for k, most in mask_figure_bounds(OverflowStats(policy, **got)).items():
        if isinstance(overflow.get(k), int) and overflow[k] > most:
            log.add("manifest_stats", f"the manifest's stats.overflow.{k} is {overflow[k]}, more than the shards' "
                    f"{most} cut(s) can lose (one target each at most)", expected=most, found=overflow[k])
    if source_dir is not None:
        _check_source_lengths(s, n, rows, n_chunks, order, segs, shard_of, names, align, policy,
                              n_seq, overflow, source_dir, log, changes or {})


def _check_source_lengths(s, n, rows, n_chunks, order, segs, shard_of, names, align, policy, n_seq,
                          overflow, source_dir, log, changes: dict) -> None:
    """With the source: each row's pieces add up to the whole row (split, whole) or to the
    kept prefix (truncate); tokens themselves were compared by the shard workers."""
    from packtool.tokenize.flat_tokens import FlatTokens
    src = FlatTokens.open(source_dir)
    src_len = np.diff(src.offsets)
    if n_seq is not None and n_seq != src_len.size:
        log.add("source_rows", f"the source has {src_len.size} rows, the manifest's stats.sequences is "
                f"{n_seq}: not the input this output was packed from", expected=n_seq, found=int(src_len.size))
    valid = rows[(rows >= 0) & (rows < src_len.size)]
    got_total = np.add.reduceat(n, np.searchsorted(s, rows)) if rows.size else n
    got_total = got_total[(rows >= 0) & (rows < src_len.size)]
    want = src_len[valid]
    if policy == "truncate":
        want = np.minimum(want, align.usable)
        dropped = int((src_len[valid] - want).sum())
        if "tokens_dropped" in overflow and overflow["tokens_dropped"] != dropped:
            log.add("manifest_stats", f"the manifest's stats.overflow.tokens_dropped is "
                    f"{overflow['tokens_dropped']}, the source gives {dropped}",
                    expected=dropped, found=overflow["tokens_dropped"])
    if policy in MASK_FIGURES:
        _check_cut_targets(src, align.usable, policy, overflow, log)
    if "sequences_one_token" in changes:  # absent in older outputs
        from packtool.planning.cut_targets import one_token_rows
        one, _ = one_token_rows(src_len)
        if changes["sequences_one_token"] != one:
            log.add("manifest_stats", f"the manifest's stats.changes.sequences_one_token is "
                    f"{changes['sequences_one_token']}, the source gives {one}",
                    expected=one, found=changes["sequences_one_token"])
    wrong = np.flatnonzero(got_total != want)
    if wrong.size:
        from packtool.tokenize.source_rows import describe_row, source_rows_at
        rows_of = source_rows_at(source_dir)
    for j in wrong:
        r = int(valid[j])
        i = order[np.searchsorted(s, r)]
        text, at = describe_row(rows_of, r)
        log.add("source_length", f"{text} has {int(src_len[r])} tokens; its segments hold "
                f"{int(got_total[j])}, expected {int(want[j])} under overflow policy {policy!r}",
                **{**_where(i, segs, shard_of, names), "segment": None},
                expected=int(want[j]), found=int(got_total[j]), **at)
    if n_seq is None or n_seq != src_len.size:
        missing = np.setdiff1d(np.arange(src_len.size), rows, assume_unique=True)
        if missing.size:
            log.add("missing_sequence", f"{missing.size} source row(s) appear in no slab, first "
                    f"{int(missing[0])}", expected=int(src_len.size), found=int(src_len.size - missing.size))


def _check_cut_targets(src, usable: int, policy: str, overflow: dict, log) -> None:
    """The targets truncate cut away (and the sequences it left with none) or split lost at its
    cuts, counted from the source's loss masks by pack's own count (planning.cut_targets);
    `untrained` is absent in older outputs."""
    from packtool.planning.cut_targets import cut_targets_of_store
    cut = cut_targets_of_store(src, usable, split=policy == "split")
    for k in MASK_FIGURES[policy]:
        v = {"targets_lost": cut.targets, "untrained": cut.untrained}[k]
        if k in overflow and overflow[k] != v:
            log.add("manifest_stats", f"the manifest's stats.overflow.{k} is {overflow[k]}, the source "
                    f"gives {v}", expected=v, found=overflow[k])


def check_dp(slabs: dict, dp: int, log: ProblemLog, nulls: dict | None = None,
             shards: tuple[list[str], list[int]] | None = None) -> None:
    """The DP fields' rules, the readers' own (`slabs.open_rules.plan_breaks`): each broken rule said
    once, at its first slab, in the words a reader refuses it with. `nulls` (per field, the slabs
    where it is null, each said as a `schema` problem): a rule fails only where no values in place
    of the nulls could keep it. `shards` (names, slabs in each): the slab named by shard and row."""
    known = {k: ~v for k, v in (nulls or {}).items() if k in DP_FIELDS}
    for b in plan_breaks(slabs["slab_index"], slabs["dp_rank"], slabs["step"], slabs["microbatch"], dp, known):
        if shards is None:
            log.add(b.rule, f"slab {b.slab}: {b.why}", expected=b.expected, found=b.found)
            continue
        names, counts = shards
        ends = np.cumsum(counts)
        j = int(np.searchsorted(ends, b.slab, "right"))
        log.add(b.rule, b.why, shard=names[j], row=b.slab - int(ends[j] - counts[j]),
                expected=b.expected, found=b.found)
