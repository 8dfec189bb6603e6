"""One slab as a padding-free model's features (`slab_features`: ids, labels, segment lengths;
`slab_side_features`: a side column as stored and shifted like labels), on the positions a
batch keeps (`kept_positions`: the alignment pads dropped, or every physical position). The
collator (hf/collator.py) concatenates them; the rules are the package's (hf/__init__.py).
"""
from __future__ import annotations

import numpy as np

from packtool.errors import PacktoolConfigError, PacktoolInputError
from packtool.hf.rows import FIX, check_row
from packtool.layout import shift_like_labels
from packtool.params import switch
from packtool.side import side_values

IGNORE_INDEX = -100  # transformers' ignore_index of the causal-LM loss


def kept_positions(seq_lens, cu_seqlens_padded, n: int, keep_pads: bool) -> tuple[np.ndarray, np.ndarray]:
    """(slab positions a batch keeps, lengths of the kept segments incl. empty ones)."""
    cu = np.asarray(cu_seqlens_padded, np.int64)
    if keep_pads:
        return np.arange(n), np.diff(cu)
    lens = np.asarray(seq_lens, np.int64)
    first = np.cumsum(lens) - lens  # where each segment starts once the pads are gone
    return np.repeat(cu[:-1] - first, lens) + np.arange(int(lens.sum())), lens


def slab_features(input_ids, loss_mask, seq_lens, cu_seqlens_padded,
                  keep_pads: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(input_ids int64[n], labels int64[n], segment lengths int64[k]) of one slab.
    `keep_pads=False` keeps each segment's real tokens only; True keeps every physical
    position, the tail pad in the last segment and a fixed-length fill as its own segment."""
    mask = np.asarray(loss_mask)
    keep_pads = switch("keep_pads", keep_pads, PacktoolConfigError)
    bad = np.flatnonzero((mask != 0) & (mask != 1))  # `!= 0` would train on 2, -1 or NaN as a target
    if bad.size:
        raise PacktoolInputError(f"loss_mask holds {mask[bad[0]]} at slab position {int(bad[0])}: a slab's "
                                 f"loss_mask is 0 or 1 (FORMAT.md); these rows are not as packtool wrote "
                                 f"them: check the output with `packtool verify`")
    ids, seq_lens, cu_seqlens_padded = check_row(input_ids, mask, seq_lens, cu_seqlens_padded)
    idx, lens = kept_positions(seq_lens, cu_seqlens_padded, ids.size, keep_pads)
    lens = lens[lens > 0]
    out_ids = ids[idx].astype(np.int64)
    labels = np.where(mask[idx] != 0, out_ids, IGNORE_INDEX)
    # FORMAT.md already gives a segment's first token no loss; a batch must never predict it
    # from the previous segment, whatever the file says
    labels[np.cumsum(lens) - lens] = IGNORE_INDEX
    return out_ids, labels, lens


def slab_side_features(values, seq_lens, cu_seqlens_padded, fill,
                       keep_pads: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(as stored, shifted like labels) of one slab's side column, on the positions
    `slab_features` keeps. The shift runs over the kept segments, so with the pads dropped
    a segment's last real token gets the fill, never the next segment's first value."""
    keep_pads = switch("keep_pads", keep_pads, PacktoolConfigError)
    v, why = side_values(values, None)
    if why is None and v.size == 0 and v.dtype.kind not in "fiu":  # [] holds no type: fill's
        v = v.astype(np.float32)
    if why is None:
        cu = np.asarray(cu_seqlens_padded)
        if cu.ndim == 1 and cu.size and cu.dtype.kind in "iu" and int(cu[-1]) != v.shape[0]:
            why = f"hold {v.shape[0]} rows, cu_seqlens_padded ends at {int(cu[-1])}: one row per slab position"
    if why:
        raise PacktoolInputError(f"slab_side_features: values {why}; {FIX}")
    seq_lens, cu_seqlens_padded = (check_row(np.zeros(v.shape[0], np.int64), np.zeros(v.shape[0], np.int8),
                                             seq_lens, cu_seqlens_padded)[1:])
    idx, lens = kept_positions(seq_lens, cu_seqlens_padded, v.shape[0], keep_pads)
    kept = v[idx]
    return kept, shift_like_labels(kept, np.concatenate(([0], np.cumsum(lens))), fill)
