"""`verify`, one shard: every per-slab and per-token invariant of FORMAT.md, batch by batch.

A worker process runs `check_shard` on one shard file. Memory is bounded by one record batch
(the reader streams row groups); list columns are flattened once per batch and checked with
numpy over their offsets, the per-token rules in one numba pass. The expected layout comes
from `layout.compute_layout` on the rows' own `seq_lens`: the same code the packer ran.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from packtool.align import Alignment
from packtool.arrays import first_null, null_rows
from packtool.layout import compute_layout, cp_local_cu_seqlens_padded, cp_merge, cp_rank_index
from packtool.storage import arrow_file, file_size
from packtool.tokenize.checksum import SHARD_CHECKSUM, file_digest
from packtool.verification.problems import ProblemLog, first_of, segment_problems
from packtool.verification.side import check_side_batch, check_side_schema
from packtool.verification.tokens import TOKEN_CHECKS, source_ranges, token_pass, token_problems

LIST_COLUMNS = {
    "input_ids": pa.int32(), "loss_mask": pa.uint8(), "seq_lens": pa.int32(),
    "cu_seqlens": pa.int32(), "cu_seqlens_padded": pa.int32(), "cp_offsets": pa.int32(),
    "source_index": pa.int64(), "chunk_index": pa.int32(), "source_offset": pa.int64(),
}
SCALAR_COLUMNS = {
    "num_tokens": pa.int32(), "num_loss_tokens": pa.int32(), "layout_pad": pa.int32(),
    "tail_pad": pa.int32(), "fill_pad": pa.int32(), "singleton": pa.bool_(),
    "slab_index": pa.int64(), "dp_rank": pa.int32(), "step": pa.int32(), "microbatch": pa.int32(),
}
SLAB_FIELDS = ("slab_index", "dp_rank", "step", "microbatch", "num_tokens", "singleton")


@dataclass(frozen=True)
class ShardJob:
    path: str
    name: str
    alignment: Alignment
    overflow_policy: str
    pad_id: int
    vocab_size: int | None
    source_dir: str | None = None  # FlatTokens directory of the tokenized source
    batch_rows: int = 128
    max_problems: int = 20
    row_groups: tuple[int, int] | None = None  # a piece of the shard; None: all of it
    row0: int = 0  # rows before the piece
    hash_file: bool = True  # one piece per shard hashes the whole file
    checksum: str = SHARD_CHECKSUM  # the algorithm the manifest used (older ones: sha256)
    side: tuple = ()  # the manifest's side columns (verification/side.py)
    source_side: tuple = ()  # the tokenized source's side columns (its store's order)
    side_source: tuple = ()  # per manifest side column, its index in source_side, -1: not compared


@dataclass
class ShardResult:
    name: str
    digest: str  # of the job's `checksum` algorithm
    bytes: int
    rows: int = 0
    readable: bool = True
    totals: dict = field(default_factory=dict)  # physical/real/loss tokens, pads, slack
    slabs: dict = field(default_factory=dict)  # SLAB_FIELDS -> array per row
    segments: dict = field(default_factory=dict)  # source, chunk, offset, length, row, seg
    log: ProblemLog | None = None
    skipped: int = 0  # rows with inconsistent array lengths, whose segments and tokens are not counted


# --- helpers over Arrow list columns -----------------------------------------------------

def _flat(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(values, offsets from 0) of a list array, honouring slicing; no Python per-row work."""
    off = arr.offsets.to_numpy().astype(np.int64)
    vals = arr.values.slice(int(off[0]), int(off[-1] - off[0])).to_numpy(zero_copy_only=False)
    return vals, off - off[0]


def check_shard(job: ShardJob) -> ShardResult:
    digest, size = ((file_digest(job.path, job.checksum), file_size(job.path)) if job.hash_file
                    else ("", 0))
    res = ShardResult(job.name, digest, size, log=ProblemLog(job.max_problems))
    log = res.log
    try:
        pf = pq.ParquetFile(arrow_file(job.path))
    except (OSError, pa.ArrowException) as e:
        res.readable = False
        log.add("shard_unreadable", f"cannot open as Parquet ({e}); the file is truncated or "
                f"corrupt: re-run `packtool pack`", shard=job.name)
        return res
    # every piece checks the schema; only the first reports it
    schema_log = log if job.hash_file else ProblemLog()
    if not (_check_schema(pf.schema_arrow, job.name, schema_log)
            & check_side_schema(pf.schema_arrow, job.side, job.name, schema_log)):
        res.readable = False
        return res
    src = rows_of = None
    if job.source_dir:
        from packtool.tokenize.flat_tokens import FlatTokens
        src = FlatTokens.open(job.source_dir)
        if job.source_side:
            src = replace(src, side=job.source_side)
        # a source row is named by its input file and row there (read only if a message needs it)
        from packtool.tokenize.source_rows import source_rows_at
        rows_of = source_rows_at(job.source_dir)
    acc = _Acc()
    row0 = job.row0
    groups = None if job.row_groups is None else list(range(*job.row_groups))
    try:
        for batch in pf.iter_batches(batch_size=job.batch_rows, row_groups=groups, use_threads=False):
            _check_batch(batch, row0, job, src, log, acc, rows_of)
            row0 += batch.num_rows
    except (OSError, pa.ArrowException) as e:
        res.readable = False
        log.add("shard_unreadable", f"cannot decode after row {row0} ({e}); the file is "
                f"truncated or corrupt: re-run `packtool pack`", shard=job.name, row=row0)
    res.rows = row0 - job.row0
    res.totals, res.slabs, res.segments = acc.finish()
    res.skipped = acc.skipped
    return res


def _check_schema(schema: pa.Schema, name: str, log: ProblemLog) -> bool:
    ok = True
    want = {**{k: pa.list_(v) for k, v in LIST_COLUMNS.items()}, **SCALAR_COLUMNS}
    for col, typ in want.items():
        i = schema.get_field_index(col)
        if i < 0:
            log.add("schema", f"column {col!r} is missing (FORMAT.md v1 needs it)", shard=name,
                    expected=str(typ), found=None)
            ok = False
        elif schema.field(i).type != typ:
            log.add("schema", f"column {col!r} has type {schema.field(i).type}, FORMAT.md v1 says {typ}",
                    shard=name, expected=str(typ), found=str(schema.field(i).type))
            ok = False
    return ok


class _Acc:
    """Per-shard accumulators: totals and the per-slab / per-segment arrays `verify` merges."""

    def __init__(self) -> None:
        self.tot = dict(physical_tokens=0, real_tokens=0, loss_tokens=0, layout_pad=0,
                        tail_pad=0, fill_pad=0, slack=0, singletons=0)
        self.slab = {k: [] for k in SLAB_FIELDS}
        self.seg = {k: [] for k in ("source", "chunk", "offset", "length", "row", "seg")}
        self.skipped = 0  # rows with inconsistent array lengths or nulls: in `slab`, not in `seg` or `tot`

    def skip(self, S: dict, start: int, stop: int) -> None:
        """Rows [start, stop) of a batch that no list check could pair: their scalar columns
        still count (slab_index, DP), their segments and tokens cannot."""
        for k in SLAB_FIELDS:
            self.slab[k].append(S[k][start:stop])
        self.skipped += int(stop - start)

    def finish(self):
        cat = lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt)  # noqa: E731
        slabs = {k: cat(v, bool if k == "singleton" else np.int64) for k, v in self.slab.items()}
        # a few bytes per segment: the parent holds these for the whole output (coverage)
        wide = ("source", "offset")
        segs = {k: cat(v, np.int64 if k in wide else np.int32) for k, v in self.seg.items()}
        return dict(self.tot), slabs, segs


def _split(batch: pa.RecordBatch, bad: np.ndarray, S: dict, row0: int, job: ShardJob, src, log: ProblemLog,
           acc: _Acc, rows_of=None) -> None:
    """Rows `bad` skipped (their scalars counted), the other rows checked as their own
    batches, in on-disk order."""
    edges = np.flatnonzero(np.diff(np.concatenate(([-1], bad.view(np.int8), [-1]))))
    for start, stop in zip(edges[:-1], edges[1:]):
        if bad[start]:
            acc.skip(S, start, stop)
        else:
            _check_batch(batch.slice(start, stop - start), row0 + int(start), job, src, log, acc, rows_of)


def _check_batch(batch: pa.RecordBatch, row0: int, job: ShardJob, src, log: ProblemLog,
                 acc: _Acc, rows_of=None) -> None:
    a, name, n = job.alignment, job.name, batch.num_rows
    where = dict(shard=name)
    nulls = np.zeros(n, bool)
    for col in (*LIST_COLUMNS, *SCALAR_COLUMNS):  # side columns: side_null, with the batch's other checks
        r = first_null(batch.column(col))  # at any depth: a null token id reads back as NaN
        if r >= 0:
            log.add("schema", f"column {col!r} holds a null", row=row0 + r, **where)
            if col in SCALAR_COLUMNS:
                return  # a slab whose own scalars are unknown: none of the batch can be counted
            nulls |= null_rows(batch.column(col))
    S = {c: batch.column(c).to_numpy(zero_copy_only=False) for c in SCALAR_COLUMNS}
    if nulls.any():  # like inconsistent lengths: those rows skipped, their scalars counted
        return _split(batch, nulls, S, row0, job, src, log, acc, rows_of)
    L = {c: _flat(batch.column(c)) for c in LIST_COLUMNS}
    T = np.diff(L["input_ids"][1])
    nseg = np.diff(L["seq_lens"][1])
    bad = _array_lengths(L, T, nseg, row0, where, log)
    if bad.any():
        return _split(batch, bad, S, row0, job, src, log, acc, rows_of)
    seg_row = np.repeat(np.arange(n), nseg)
    seg_off = L["seq_lens"][1]
    seg_in_row = np.arange(seg_row.size) - seg_off[seg_row]
    seq_lens = L["seq_lens"][0].astype(np.int64)
    src_idx, chunk, s_off = (L[c][0].astype(np.int64) for c in ("source_index", "chunk_index", "source_offset"))
    # 2. cu arrays: start at 0, differences are seq_lens / padded lengths, last padded == T
    cu_off = L["cu_seqlens"][1]
    not_first = np.ones(cu_off[-1], bool)
    not_first[cu_off[:-1]] = False
    ok_rows = np.ones(n, bool)
    padded = np.zeros(seg_row.size, np.int64)
    for col in ("cu_seqlens", "cu_seqlens_padded"):
        cu = L[col][0].astype(np.int64)
        d = cu[1:] - cu[:-1]
        d = d[not_first[1:]]
        firsts = cu[cu_off[:-1]]
        for r in np.flatnonzero(firsts != 0):
            log.add(col, f"{col}[0] is {int(firsts[r])}, must be 0", row=row0 + int(r),
                    segment=0, expected=0, found=int(firsts[r]), **where)
        ok_rows &= firsts == 0
        if col == "cu_seqlens":
            wrong = d != seq_lens
            segment_problems(log, col, wrong, seg_row, seg_in_row, row0, where,
                          lambda i: f"cu_seqlens difference at segment {int(seg_in_row[i])} is {int(d[i])}, "
                                    f"seq_lens says {int(seq_lens[i])}", seq_lens, d)
        else:
            padded = d
            wrong = (d < seq_lens)
            segment_problems(log, col, wrong, seg_row, seg_in_row, row0, where,
                          lambda i: f"cu_seqlens_padded gives segment {int(seg_in_row[i])} "
                                    f"{int(d[i])} physical tokens, fewer than its {int(seq_lens[i])} real "
                                    f"tokens (not monotone or inconsistent with seq_lens)", seq_lens, d)
            last = cu[cu_off[1:] - 1]
            for r in np.flatnonzero(last != T):
                log.add(col, f"cu_seqlens_padded[-1] is {int(last[r])}, but the slab holds T={int(T[r])} tokens",
                        row=row0 + int(r), expected=int(T[r]), found=int(last[r]), **where)
            ok_rows &= last == T
        if col == "cu_seqlens_padded":  # only the physical layout gates the later checks
            ok_rows &= np.logical_and.reduceat(~wrong, seg_off[:-1]) if wrong.size else ok_rows
    # 3. CP offsets: cu_seqlens_padded / cp, via the layout helper the loader uses
    cup = L["cu_seqlens_padded"][0].astype(np.int64)
    want_cp = cp_local_cu_seqlens_padded(cup, a.cp)
    cpo = L["cp_offsets"][0].astype(np.int64)
    for i in np.flatnonzero(want_cp != cpo)[:1]:
        r = int(np.searchsorted(cu_off, i, side="right") - 1)
        log.add("cp_offsets", f"cp_offsets[{int(i - cu_off[r])}] is {int(cpo[i])}, expected "
                f"cu_seqlens_padded // cp = {int(want_cp[i])} (cp={a.cp})", row=row0 + r,
                segment=int(i - cu_off[r]), expected=int(want_cp[i]), found=int(cpo[i]), **where)
    # 4. segment kinds: a fill segment (source -1) is empty and last; real ones are not
    fill = src_idx < 0
    bad_fill = fill & ((seq_lens != 0) | (chunk != -1))
    bad_real = ~fill & ((seq_lens < 1) | (chunk < 0) | (s_off < 0))
    last_seg = np.zeros(seg_row.size, bool)
    last_seg[seg_off[1:] - 1] = True
    bad_pos = fill & (~last_seg | (a.fixed_length is None))
    segment_problems(log, "segment_fields", bad_fill | bad_real | bad_pos, seg_row, seg_in_row, row0, where,
                  lambda i: (f"segment {int(seg_in_row[i])}: source_index={int(src_idx[i])} chunk_index="
                             f"{int(chunk[i])} seq_len={int(seq_lens[i])} source_offset={int(s_off[i])} "
                             f"is neither a real segment (source>=0, chunk>=0, len>=1) nor a trailing "
                             f"fixed-length fill (source -1, chunk -1, len 0)"))
    real_count = np.add.reduceat((~fill).astype(np.int64), seg_off[:-1])
    ok_rows &= real_count >= 1
    ok_rows &= ~np.logical_or.reduceat(bad_fill | bad_real | bad_pos, seg_off[:-1])
    _check_layout(L, S, T, nseg, seq_lens, padded, fill, seg_row, seg_in_row, ok_rows, row0, job, log, acc)
    # 5. per-token rules, one numba pass (only over rows whose cu arrays are sane)
    ids, ids_off = L["input_ids"]
    loss = L["loss_mask"][0]
    use_src = np.zeros(seg_row.size, bool)
    src_base = np.zeros(seg_row.size, np.int64)
    s_tok = np.zeros(1, np.int32)
    if src is not None:
        use_src, src_base = source_ranges(src, src_idx, s_off, seq_lens, fill, seg_row, seg_in_row,
                                           row0, where, log, rows_of)
        s_tok = src.tokens
    seg_start = cup[not_first] - padded  # start of each segment inside its slab
    rows_ok_seg = ok_rows[seg_row]
    cnt = np.zeros((n, len(TOKEN_CHECKS)), np.int64)
    first = np.full((n, len(TOKEN_CHECKS), 4), -1, np.int64)
    loss_sum = np.zeros(n, np.int64)
    token_pass(ids, loss, ids_off, seg_off, seg_start, seq_lens,
                np.where(rows_ok_seg, padded, 0), job.pad_id, job.vocab_size or 0,
                s_tok, src_base, use_src & rows_ok_seg, loss_sum, cnt, first)
    token_problems(cnt, first, src_idx, s_off, seg_off, row0, where, log, rows_of)
    if not ok_rows.all():  # rows the token pass skipped still count towards the totals
        loss_sum[~ok_rows] = np.add.reduceat(loss.astype(np.int64), ids_off[:-1])[~ok_rows]
    nl = S["num_loss_tokens"].astype(np.int64)
    for r in np.flatnonzero(ok_rows & (nl != loss_sum)):
        log.add("num_loss_tokens", f"num_loss_tokens is {int(nl[r])}, loss_mask sums to {int(loss_sum[r])}",
                row=row0 + int(r), expected=int(loss_sum[r]), found=int(nl[r]), **where)
    if a.cp > 1:
        _check_cp(ids, ids_off, seg_start, padded, seg_off, ok_rows, a.cp, row0, where, log)
    if job.side:
        source = None
        if src is not None and any(k >= 0 for k in job.side_source):
            sel = use_src & rows_ok_seg
            source = (src, job.side_source, ids_off[seg_row[sel]] + seg_start[sel], src_idx[sel], s_off[sel],
                      seq_lens[sel], seg_in_row[sel], rows_of)
        odd = check_side_batch(batch, job.side, ids, ids_off, loss, seg_row, seg_start, seq_lens, fill, ok_rows,
                               row0, where, log, source)
        for k, v in odd.items():
            acc.tot[k] = acc.tot.get(k, 0) + v
    acc.tot["physical_tokens"] += int(T.sum())
    acc.tot["real_tokens"] += int(seq_lens.sum())
    acc.tot["loss_tokens"] += int(loss_sum.sum())
    single = S["singleton"].astype(bool)
    for k in ("layout_pad", "tail_pad", "fill_pad"):
        acc.tot[k] += int(S[k].astype(np.int64).sum())
    acc.tot["slack"] += int(np.maximum(a.usable - T[~single], 0).sum())
    acc.tot["singletons"] += int(single.sum())
    for k in ("slab_index", "dp_rank", "step", "microbatch", "singleton"):
        acc.slab[k].append(S[k])
    acc.slab["num_tokens"].append(S["num_tokens"])
    real = ~fill
    for k, v in (("source", src_idx), ("chunk", chunk), ("offset", s_off), ("length", seq_lens),
                 ("row", seg_row + row0), ("seg", seg_in_row)):
        acc.seg[k].append(v[real])


def _array_lengths(L, T, nseg, row0, where, log) -> np.ndarray:
    """Rows whose lists disagree with T or n_seg (each said as an `array_length` problem): no
    other check can pair their entries, so the caller checks the batch's other rows alone."""
    bad = np.zeros(T.size, bool)
    for col, want, what in (("loss_mask", T, "T (input_ids)"), ("cu_seqlens", nseg + 1, "n_seg+1"),
                            ("cu_seqlens_padded", nseg + 1, "n_seg+1"), ("cp_offsets", nseg + 1, "n_seg+1"),
                            ("source_index", nseg, "n_seg"), ("chunk_index", nseg, "n_seg"),
                            ("source_offset", nseg, "n_seg")):
        got = np.diff(L[col][1])
        for r in np.flatnonzero(got != want):
            log.add("array_length", f"{col} has {int(got[r])} entries, expected {what} = {int(want[r])}",
                    row=row0 + int(r), expected=int(want[r]), found=int(got[r]), **where)
        bad |= got != want
    for r in np.flatnonzero(nseg < 1):
        log.add("array_length", "slab has no segments", row=row0 + int(r), **where)
    return bad | (nseg < 1)


def _check_layout(L, S, T, nseg, seq_lens, padded, fill, seg_row, seg_in_row, ok_rows, row0, job, log, acc):
    """Recompute each slab's layout from its real seq_lens with compute_layout and compare."""
    a, where = job.alignment, dict(shard=job.name)
    real = ~fill
    rows = np.flatnonzero(ok_rows)
    if rows.size == 0:
        return
    sel = ok_rows[seg_row] & real
    counts = np.bincount(seg_row[sel], minlength=T.size)[rows]
    lay = compute_layout(seq_lens[sel], np.concatenate(([0], np.cumsum(counts))), a)
    fill_pad, tail_pad, layout_pad = (S[c].astype(np.int64)[rows] for c in ("fill_pad", "tail_pad", "layout_pad"))
    singleton = S["singleton"].astype(bool)[rows]
    Tr = T[rows]
    foot = Tr - fill_pad
    # divisibility and capacity, phrased by the rule that the manifest's config imposes
    seg_bad = np.flatnonzero(ok_rows[seg_row] & (padded % a.s != 0))
    for i in seg_bad[first_of(seg_row[seg_bad])]:
        log.add("segment_alignment", f"segment {int(seg_in_row[i])} has padded length {int(padded[i])}, "
                f"not a multiple of the per-sequence multiple s={a.s} ({a.describe()})",
                row=row0 + int(seg_row[i]), segment=int(seg_in_row[i]), expected=a.s, found=int(padded[i]), **where)
    for j in np.flatnonzero(foot % a.t != 0):
        log.add("slab_alignment", f"slab footprint T-fill_pad = {int(foot[j])} is not a multiple of the "
                f"per-slab multiple t={a.t} required by {a.describe()}", row=row0 + int(rows[j]),
                expected=int(-(-foot[j] // a.t) * a.t), found=int(foot[j]), **where)
    over = (foot > a.usable) & ~singleton
    for j in np.flatnonzero(over):
        log.add("capacity", f"slab footprint {int(foot[j])} exceeds the usable capacity U={a.usable} "
                f"(capacity {a.capacity}) and the slab is not a declared singleton",
                row=row0 + int(rows[j]), expected=a.usable, found=int(foot[j]), **where)
    one_fit = (counts != 1) | (lay.footprint <= a.usable)
    for j in np.flatnonzero(singleton & (one_fit | (job.overflow_policy != "singleton"))):
        log.add("singleton", f"slab is marked singleton but holds {int(counts[j])} real segment(s) with "
                f"footprint {int(lay.footprint[j])} (U={a.usable}, overflow policy "
                f"{job.overflow_policy!r})", row=row0 + int(rows[j]), **where)
    if a.fixed_length is not None:
        for j in np.flatnonzero((Tr != a.fixed_length) & ~singleton):
            log.add("fixed_length", f"slab has T={int(Tr[j])} tokens, the fixed length is {a.fixed_length}",
                    row=row0 + int(rows[j]), expected=a.fixed_length, found=int(Tr[j]), **where)
    # the layout itself: the same compute_layout the packer ran, compared figure by figure
    for col, want, got in (("T", lay.slab_len, Tr), ("layout_pad", lay.layout_pad, layout_pad),
                           ("tail_pad", lay.tail_pad, tail_pad), ("fill_pad", lay.fill, fill_pad),
                           ("num_tokens", np.add.reduceat(lay.seg_len, lay.seg_offsets[:-1]),
                            S["num_tokens"].astype(np.int64)[rows])):
        for j in np.flatnonzero(want != got):
            log.add("layout", f"{col} is {int(got[j])}, the layout of its seq_lens under {a.describe()} "
                    f"C={a.capacity} gives {int(want[j])}", row=row0 + int(rows[j]),
                    expected=int(want[j]), found=int(got[j]), **where)
    same_n = np.diff(lay.seg_offsets) == nseg[rows]
    seg_sel = np.isin(seg_row, rows[same_n])
    exp_sel = np.repeat(same_n, np.diff(lay.seg_offsets))
    diff = np.flatnonzero((lay.seg_padded[exp_sel] != padded[seg_sel]) | (lay.is_fill[exp_sel] != fill[seg_sel]))
    sr, si, ep, fp_ = seg_row[seg_sel], seg_in_row[seg_sel], lay.seg_padded[exp_sel], padded[seg_sel]
    for i in diff[first_of(sr[diff])]:
        log.add("layout", f"segment {int(si[i])} occupies {int(fp_[i])} physical tokens; the layout "
                f"of this slab's seq_lens gives {int(ep[i])}", row=row0 + int(sr[i]), segment=int(si[i]),
                expected=int(ep[i]), found=int(fp_[i]), **where)
    for j in np.flatnonzero(~same_n):
        log.add("layout", f"slab has {int(nseg[rows[j]])} segments; its seq_lens lay out as "
                f"{int(np.diff(lay.seg_offsets)[j])} (a fixed-length fill segment is missing or extra)",
                row=row0 + int(rows[j]), **where)


def _check_cp(ids, ids_off, seg_start, padded, seg_off, ok_rows, cp, row0, where, log):
    """CP zigzag (rank r holds chunks r and 2cp-1-r of every segment). For every segment: its
    padded length splits into 2*cp equal chunks (cp_chunk_ranges, the loader's own cut). For
    the first sane slab of the batch, token by token: cut it into the ranks' local slabs with
    cp_rank_index, check each holds T/cp tokens, and merge them back with cp_merge. (Once every
    segment divides, the round trip is exact for any tokens, so one slab per batch exercises
    the loader's path without paying cp extra passes over every token.)"""
    seg_sel = np.repeat(ok_rows, np.diff(seg_off))
    bad = np.flatnonzero(seg_sel & (padded % (2 * cp) != 0))
    for i in bad[:1]:
        r = int(np.searchsorted(seg_off, i, side="right") - 1)
        log.add("cp_chunks", f"segment {int(i - seg_off[r])} has padded length {int(padded[i])}, which "
                f"cannot be cut into 2*cp={2 * cp} equal zigzag chunks", row=row0 + r,
                segment=int(i - seg_off[r]), expected=2 * cp, found=int(padded[i]), **where)
    rows = np.flatnonzero(ok_rows)
    if not rows.size or bad.size:
        return
    r = int(rows[0])
    lo, hi = int(seg_off[r]), int(seg_off[r + 1])
    slab = ids[ids_off[r]:ids_off[r + 1]]
    starts, pads = seg_start[lo:hi], padded[lo:hi]
    locals_ = [slab[cp_rank_index(starts, pads, cp, k)] for k in range(cp)]
    sizes = [loc.size for loc in locals_]
    if any(n * cp != slab.size for n in sizes):
        log.add("cp_chunks", f"CP ranks would hold {sizes} tokens of a {slab.size}-token slab; each needs "
                f"T/cp = {slab.size // cp}", row=row0 + r, **where)
        return
    if not np.array_equal(cp_merge(locals_, starts, pads, cp), slab):
        log.add("cp_chunks", "merging the CP ranks' zigzag chunks does not give back the slab",
                row=row0 + r, **where)
