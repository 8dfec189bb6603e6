"""`verify`, per token: one numba pass over a record batch's flattened tokens and loss mask
(pads, first tokens, loss values, vocabulary, and with a source every token and loss flag),
then one problem per row and kind, naming the first position."""
from __future__ import annotations

import numba as nb
import numpy as np

from packtool.tokenize.flat_tokens import token_id, token_loss
from packtool.tokenize.source_rows import describe_row
from packtool.verification.problems import segment_problems

# --- per-token checks (numba) --------------------------------------------------------
# kinds of per-token problem; each row records its count and the first occurrence
TOK_LOSS_VALUE, TOK_LOSS_FIRST, TOK_LOSS_PAD, TOK_PAD_ID, TOK_ID_RANGE, TOK_SRC_ID, TOK_SRC_LOSS = range(7)
TOKEN_CHECKS = ("loss_mask_value", "loss_on_first_token", "loss_on_pad", "pad_token",
                "token_id_range", "source_tokens", "source_loss_mask")


@nb.njit(cache=True)
def _slow_segment(ids, loss, st, base, kk, L, P, pad_id, vocab, src_tok, a0, use_src, r, cnt, first):
    """Classify every position of one segment that failed the fast pass (rare: only broken
    segments come here). first[r, kind] = (position in slab, segment in slab, expected, found)."""
    for j in range(P):
        v = ids[st + j]
        m = loss[st + j]
        kind = -1
        exp = 0
        if j >= L:
            if m != 0:
                kind = TOK_LOSS_PAD
            elif v != pad_id:
                kind, exp = TOK_PAD_ID, pad_id
        elif m > 1:
            kind, exp = TOK_LOSS_VALUE, 1
        elif j == 0 and m != 0:
            kind = TOK_LOSS_FIRST
        elif v < 0 or (vocab > 0 and v >= vocab):
            kind, exp = TOK_ID_RANGE, vocab
        elif use_src:
            sv = src_tok[a0 + j]
            if v != token_id(sv):
                kind, exp = TOK_SRC_ID, token_id(sv)
            else:
                em = 0 if j == 0 else token_loss(sv)
                if m != em:
                    kind, exp = TOK_SRC_LOSS, em
        if kind >= 0:
            if cnt[r, kind] == 0:
                first[r, kind, 0] = st + j - base
                first[r, kind, 1] = kk
                first[r, kind, 2] = exp
                first[r, kind, 3] = m if kind <= TOK_LOSS_PAD or kind == TOK_SRC_LOSS else v
            cnt[r, kind] += 1


@nb.njit(cache=True)
def token_pass(ids, loss, row_off, seg_row_off, seg_start, seg_len, seg_padded, pad_id, vocab,
               src_tok, src_base, use_src, loss_sum, cnt, first):
    """Fast pass: branch-free flags per segment (real part, first token, pads); a segment
    whose flag is set is classified position by position in `_slow_segment`."""
    top = vocab if vocab > 0 else 2147483647
    for r in range(row_off.size - 1):
        base = row_off[r]
        total = 0
        for k in range(seg_row_off[r], seg_row_off[r + 1]):
            st = base + seg_start[k]
            L = seg_len[k]
            P = seg_padded[k]
            bad = False
            if L > 0:
                bad = loss[st] != 0
            if use_src[k]:
                a0 = src_base[k]
                for j in range(L):
                    v = ids[st + j]
                    m = loss[st + j]
                    total += m
                    sv = src_tok[a0 + j]
                    bad |= (v != token_id(sv)) | ((m != token_loss(sv)) & (j > 0)) | (m > 1)
            else:
                for j in range(L):
                    v = ids[st + j]
                    m = loss[st + j]
                    total += m
                    bad |= (m > 1) | (v < 0) | (v >= top)
            for j in range(L, P):
                m = loss[st + j]
                total += m
                bad |= (m != 0) | (ids[st + j] != pad_id)
            if bad:
                _slow_segment(ids, loss, st, base, k - seg_row_off[r], L, P, pad_id, vocab, src_tok,
                              src_base[k], use_src[k], r, cnt, first)
        loss_sum[r] = total


def source_ranges(src, src_idx, s_off, seq_lens, fill, seg_row, seg_in_row, row0, where, log, rows_of=None):
    """Where each real segment's tokens sit in the flat source store; bad references logged.
    `rows_of` (tokenize/source_rows.SourceRows) names a source row by its file and row."""
    n_src = src.num_rows
    real = ~fill
    in_range = real & (src_idx < n_src)
    row_len = np.zeros(src_idx.size, np.int64)
    row_len[in_range] = np.diff(src.offsets)[src_idx[in_range]]
    fits = in_range & (s_off + seq_lens <= row_len)
    wrong = real & ~fits
    segment_problems(log, "source_tokens", wrong, seg_row, seg_in_row, row0, where,
                  lambda i: (f"segment {int(seg_in_row[i])} claims "
                             f"{describe_row(rows_of if in_range[i] else None, int(src_idx[i]))[0]} tokens "
                             f"[{int(s_off[i])}, {int(s_off[i] + seq_lens[i])}) but the source has "
                             f"{n_src} rows" + (f" and that row has {int(row_len[i])} tokens" if in_range[i] else "")))
    base = np.zeros(src_idx.size, np.int64)
    base[fits] = src.offsets[src_idx[fits]] + s_off[fits]
    return fits, base


def token_problems(cnt, first, src_idx, s_off, seg_off, row0, where, log, rows_of=None):
    """One problem per row and kind, naming its first position; `rows_of` (SourceRows) names
    a source row by its input file and row there."""
    msgs = {
        TOK_LOSS_VALUE: "loss_mask is {found} at position {pos} (segment {seg}); only 0/1 are allowed",
        TOK_LOSS_FIRST: "loss on the first token of segment {seg} (position {pos}): it predicts nothing",
        TOK_LOSS_PAD: "loss on a pad: loss_mask is {found} at pad position {pos} (segment {seg})",
        TOK_PAD_ID: "pad position {pos} (segment {seg}) holds token {found}, expected pad_id {expected}",
        TOK_ID_RANGE: "token {found} at position {pos} (segment {seg}) is outside the vocabulary (size {expected})",
        TOK_SRC_ID: "tokens differ from the source: segment {seg} ({src}, chunk offset {soff}) "
                    "position {pos} holds {found}, the source has {expected}",
        TOK_SRC_LOSS: "loss_mask differs from the source: segment {seg} ({src}) position {pos} "
                      "is {found}, expected {expected}",
    }
    for r, kind in zip(*np.nonzero(cnt)):
        pos, seg, exp, found = (int(x) for x in first[r, kind])
        k = seg_off[r] + seg
        src, at = describe_row(rows_of if kind in (TOK_SRC_ID, TOK_SRC_LOSS) else None, int(src_idx[k]))
        text = msgs[kind].format(pos=pos, seg=seg, expected=exp, found=found, src=src, soff=int(s_off[k]))
        if cnt[r, kind] > 1:
            text += f" ({int(cnt[r, kind])} such positions in this slab)"
        log.add(TOKEN_CHECKS[kind], text, row=row0 + int(r), segment=seg, expected=exp, found=found, **at,
                **where)


def over_recorded_max(ids, ids_off, top: int, row0: int, where: dict, log) -> None:
    """A shard's ids held to the largest id its manifest entry records (`max_token_id`, pads
    included): every reader refuses a row group holding a larger one (slabs.check), so verify
    must too. One problem per slab, naming its first such position."""
    over = np.flatnonzero(ids > top)
    if not over.size:
        return
    rows = np.searchsorted(ids_off, over, side="right") - 1
    for r in np.unique(rows):
        at = over[rows == r]
        pos, found = int(at[0] - ids_off[r]), int(ids[at[0]])
        text = (f"token {found} at position {pos} is above the shard's recorded largest id {top} "
                f"(.manifest.json max_token_id)")
        if at.size > 1:
            text += f" ({int(at.size)} such positions in this slab)"
        log.add("token_id_range", text, row=row0 + int(r), expected=top, found=found, **where)
