"""`verify`, one record batch of a shard: nulls, list lengths, the cu arrays, CP offsets,
segment kinds, then the per-token rules in one numba pass (verification/tokens.py), the
slabs' layout (verification/slab_layout.py) and side columns (verification/side.py); what
the batch adds up to goes to the shard's `Tally`. List columns are flattened once per batch
and checked with numpy over their offsets.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from packtool.arrays import first_null, null_rows
from packtool.layout import cp_local_cu_seqlens_padded
from packtool.slabs.open_rules import NO_REAL_SEGMENT, no_real_segment
from packtool.verification.job import ShardJob
from packtool.verification.problems import ProblemLog, segment_problems
from packtool.verification.side import check_side_batch
from packtool.verification.slab_layout import check_cp, check_layout
from packtool.verification.tally import Tally
from packtool.verification.tokens import TOKEN_CHECKS, over_recorded_max, source_ranges, token_pass, token_problems

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


def _flat(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(values, offsets from 0) of a list array, honouring slicing; no Python per-row work."""
    off = arr.offsets.to_numpy().astype(np.int64)
    vals = arr.values.slice(int(off[0]), int(off[-1] - off[0])).to_numpy(zero_copy_only=False)
    return vals, off - off[0]


def check_batch(batch: pa.RecordBatch, row0: int, job: ShardJob, src, log: ProblemLog,
                acc: Tally, rows_of=None) -> None:
    """Every check of one record batch. A null is said once, per row and column (`schema`);
    a slab with a null in a list column cannot be paired entry by entry, so it is skipped like
    one whose lists disagree in length (its scalars counted); a null scalar leaves the slab's
    lists checked in full and only the checks and sums that read that value out (`nulls`)."""
    where = dict(shard=job.name)
    skip = np.zeros(batch.num_rows, bool)
    for col in LIST_COLUMNS:  # side columns: side_null, with the batch's other checks
        if first_null(batch.column(col)) >= 0:  # at any depth: a null token id reads back as NaN
            rows = null_rows(batch.column(col))
            _say_nulls(col, rows, row0, where, log)
            skip |= rows
    nulls = {c: batch.column(c).is_null().to_numpy(zero_copy_only=False) for c in SCALAR_COLUMNS}
    for col, rows in nulls.items():
        _say_nulls(col, rows, row0, where, log)
    # a null scalar reads as 0 (False) here: every check and sum of it leaves out its `nulls` rows
    S = {c: pc.fill_null(batch.column(c), pa.scalar(False if t == pa.bool_() else 0, t)).to_numpy(zero_copy_only=False)
         for c, t in SCALAR_COLUMNS.items()}
    _check_rows(batch, S, nulls, skip, row0, job, src, log, acc, rows_of)


def _say_nulls(col: str, rows: np.ndarray, row0: int, where: dict, log: ProblemLog) -> None:
    for r in np.flatnonzero(rows):
        log.add("schema", f"column {col!r} holds a null (FORMAT.md: no slab column holds one): re-run "
                f"`packtool pack`", row=row0 + int(r), **where)


def _split(batch: pa.RecordBatch, bad: np.ndarray, S: dict, nulls: dict, row0: int, job: ShardJob, src,
           log: ProblemLog, acc: Tally, rows_of=None) -> None:
    """Rows `bad` skipped (their scalars counted), the other rows checked as their own
    batches, in on-disk order."""
    edges = np.flatnonzero(np.diff(np.concatenate(([-1], bad.view(np.int8), [-1]))))
    for start, stop in zip(edges[:-1], edges[1:]):
        part_s, part_nulls = ({c: v[start:stop] for c, v in d.items()} for d in (S, nulls))
        if bad[start]:
            acc.skip(part_s, part_nulls)
        else:
            _check_rows(batch.slice(start, stop - start), part_s, part_nulls, None, row0 + int(start), job,
                        src, log, acc, rows_of)


def _check_rows(batch: pa.RecordBatch, S: dict, nulls: dict, skip, row0: int, job: ShardJob, src,
                log: ProblemLog, acc: Tally, rows_of=None) -> None:
    """`check_batch` once the nulls are said: `S` the scalar columns (a null as 0), `nulls`
    per scalar column the rows it is null in, `skip` the rows no list check can pair."""
    a, n, where = job.alignment, batch.num_rows, dict(shard=job.name)
    if skip is not None and skip.any():
        return _split(batch, skip, S, nulls, row0, job, src, log, acc, rows_of)
    L = {c: _flat(batch.column(c)) for c in LIST_COLUMNS}
    T = np.diff(L["input_ids"][1])
    nseg = np.diff(L["seq_lens"][1])
    bad = _array_lengths(L, T, nseg, row0, where, log)
    if bad.any():
        return _split(batch, bad, S, nulls, row0, job, src, log, acc, rows_of)
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
    said = np.logical_or.reduceat(bad_fill | bad_real | bad_pos, seg_off[:-1])
    empty = no_real_segment(nseg, fill)  # the readers' rule: a slab of the fill alone trains nothing
    for r in np.flatnonzero(empty & ~said):
        log.add("segment_fields", f"{NO_REAL_SEGMENT} (only the fixed-length fill)", row=row0 + int(r), **where)
    ok_rows &= ~empty & ~said
    check_layout(S, nulls, T, nseg, seq_lens, padded, fill, seg_row, seg_in_row, ok_rows, row0, job, log)
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
    if job.max_token_id is not None:
        over_recorded_max(ids, ids_off, job.max_token_id, row0, where, log)
    if not ok_rows.all():  # rows the token pass skipped still count towards the totals
        loss_sum[~ok_rows] = np.add.reduceat(loss.astype(np.int64), ids_off[:-1])[~ok_rows]
    nl = S["num_loss_tokens"].astype(np.int64)
    for r in np.flatnonzero(ok_rows & ~nulls["num_loss_tokens"] & (nl != loss_sum)):
        log.add("num_loss_tokens", f"num_loss_tokens is {int(nl[r])}, loss_mask sums to {int(loss_sum[r])}",
                row=row0 + int(r), expected=int(loss_sum[r]), found=int(nl[r]), **where)
    if a.cp > 1:
        check_cp(ids, ids_off, seg_start, padded, seg_off, ok_rows, a.cp, row0, where, log)
    if job.side:
        source = None
        if src is not None and any(k >= 0 for k in job.side_source):
            sel = use_src & rows_ok_seg
            source = (src, job.side_source, ids_off[seg_row[sel]] + seg_start[sel], src_idx[sel], s_off[sel],
                      seq_lens[sel], seg_in_row[sel], rows_of)
        odd = check_side_batch(batch, job.side, ids, ids_off, loss, seg_row, seg_start, seq_lens, fill, ok_rows,
                               row0, where, log, source, job.vocab_size)
        for k, v in odd.items():
            acc.tot[k] = acc.tot.get(k, 0) + v
    acc.tot["physical_tokens"] += int(T.sum())
    acc.tot["real_tokens"] += int(seq_lens.sum())
    acc.tot["loss_tokens"] += int(loss_sum.sum())
    # the pads, slack and singletons a null scalar leaves out: run.py leaves those sums unchecked
    single = S["singleton"].astype(bool)
    for k in ("layout_pad", "tail_pad", "fill_pad"):
        acc.tot[k] += int(S[k].astype(np.int64).sum())
    acc.tot["slack"] += int(np.maximum(a.usable - T[~single], 0).sum())
    acc.tot["singletons"] += int(single.sum())
    acc.slabs(S, nulls)
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
        log.add("array_length", f"{NO_REAL_SEGMENT} (no segment at all)", row=row0 + int(r), **where)
    return bad | (nseg < 1)
