"""A slab row held to FORMAT.md's per-slab rules before `packtool.hf` builds a batch from it
(issue 23 class 2: every consumer checks what it reads). SlabDataset items were checked by the
slab reader against the manifest; rows read without it (`datasets.load_dataset("parquet", ...)`,
raw Parquet, `slab_features` called directly) reach the collator unchecked, and a row whose
layout was edited made silently wrong position_ids and labels, or a raw IndexError mid-step.

What a row alone can prove (no manifest, so no alignment or vocabulary): integer columns,
cu_seqlens_padded 0 .. T non-decreasing with one step per segment, every segment's real tokens
within its padded length, no loss on a pad, ids that are token ids (>= 0 and int32), and the
row's own copies of its layout (`cu_seqlens`, `num_tokens`) where the row carries them, and,
for a side column declared to the collator, its fill on every pad. The
alignment and vocabulary rules stay verify's (and the reader's, for SlabDataset items)."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from packtool.errors import PacktoolInputError
from packtool.integers import TOKEN_ID_BOUND

FIX = "these rows are not as packtool wrote them: check the output with `packtool verify`"


def _fail(what: str) -> PacktoolInputError:
    return PacktoolInputError(f"{what}; {FIX}")


def _ints(name: str, values) -> np.ndarray:
    """A 1-D integer column: a float or str id would be cast (1.7 -> 1) into the batch."""
    try:
        v = np.asarray(values)
    except (ValueError, TypeError):  # ragged nested lists
        raise _fail(f"{name} is not a flat list of integers") from None
    if v.ndim != 1 or (v.size and v.dtype.kind not in "iu"):
        raise _fail(f"{name} is not a flat list of integers (found {v.dtype} of shape {v.shape})")
    return v.astype(np.int64, copy=False)


def check_row(input_ids, loss_mask, seq_lens, cu_seqlens_padded) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(input_ids, seq_lens, cu_seqlens_padded) as int64, once the row keeps the per-slab rules
    above; loss_mask's own values (0 or 1) are held by `hf.slab_features`."""
    ids, lens, cu = _ints("input_ids", input_ids), _ints("seq_lens", seq_lens), _ints("cu_seqlens_padded",
                                                                                      cu_seqlens_padded)
    mask = np.asarray(loss_mask)
    if mask.ndim != 1 or mask.size != ids.size:
        raise _fail(f"loss_mask holds {mask.size} values for {ids.size} input_ids")
    if lens.size < 1 or cu.size != lens.size + 1:
        raise _fail(f"cu_seqlens_padded holds {cu.size} offsets for {lens.size} segments (seq_lens): n_seg+1")
    step = np.diff(cu)
    if cu[0] != 0 or cu[-1] != ids.size or (step < 0).any():
        raise _fail(f"cu_seqlens_padded runs {int(cu[0])}..{int(cu[-1])} (non-decreasing: "
                    f"{bool((step >= 0).all())}), the slab holds {ids.size} tokens")
    bad = np.flatnonzero((lens < 0) | (lens > step))
    if bad.size:
        s = int(bad[0])
        raise _fail(f"segment {s} holds {int(lens[s])} tokens (seq_lens) in a padded length of {int(step[s])} "
                    f"(cu_seqlens_padded): seq_lens or cu_seqlens_padded edited or shifted")
    pad = np.ones(ids.size, bool)  # positions past each segment's real tokens
    pad[np.repeat(cu[:-1], lens) + np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)] = False
    lossy = np.flatnonzero(pad & (mask != 0))
    if lossy.size:
        raise _fail(f"loss_mask is {mask[lossy[0]]} at slab position {int(lossy[0])}, a pad of its segment "
                    f"(seq_lens): a pad carries no loss, so seq_lens or the mask was edited")
    odd = np.flatnonzero((ids < 0) | (ids >= TOKEN_ID_BOUND))
    if odd.size:
        raise _fail(f"input_ids holds {int(ids[odd[0]])} at slab position {int(odd[0])}, not a token id "
                    f"(0 .. 2^31-1)")
    return ids, lens, cu


def check_copies(item: Mapping, lens: np.ndarray) -> None:
    """A row from the Parquet files also carries its layout twice more: cu_seqlens (0, then the
    prefix sums of seq_lens) and num_tokens (their sum). A shifted copy is an edited row."""
    if item.get("cu_seqlens") is not None:
        cs = _ints("cu_seqlens", item["cu_seqlens"])
        if cs.size != lens.size + 1 or cs[0] != 0 or not np.array_equal(np.diff(cs), lens):
            raise _fail("cu_seqlens is not 0 then the prefix sums of seq_lens (seq_lens or cu_seqlens edited)")
    n = item.get("num_tokens")
    if n is not None and not isinstance(n, (bool, np.bool_)) and np.ndim(n) == 0 and int(n) != int(lens.sum()):
        raise _fail(f"num_tokens is {n}, its seq_lens sum to {int(lens.sum())} (seq_lens or num_tokens edited)")


def check_side_fill(name: str, values: np.ndarray, seq_lens: np.ndarray, cu: np.ndarray, fill) -> None:
    """A declared side column's pads hold its fill, bit for bit as the writer puts it (a NaN or
    -0.0 is not the fill 0.0), as the slab reader holds SlabDataset items: with keep_pads a NaN
    on a pad reached the batch and a `(ratio * mask).sum()` loss."""
    pad = np.ones(values.shape[0], bool)
    pad[np.repeat(cu[:-1], seq_lens) + np.arange(int(seq_lens.sum())) - np.repeat(np.cumsum(seq_lens) - seq_lens,
                                                                                 seq_lens)] = False
    got = np.ascontiguousarray(values[pad])
    isz = f"i{got.dtype.itemsize}"
    bad = got.view(isz) != np.asarray(fill, got.dtype).view(isz)
    bad = bad.any(axis=1) if bad.ndim > 1 else bad
    if bad.any():
        p = int(np.flatnonzero(pad)[np.flatnonzero(bad)[0]])
        raise _fail(f"side column {name!r} holds {values[p].tolist()} at slab position {p}, a pad of its segment "
                    f"(seq_lens), where its fill is {fill}")


__all__ = ["FIX", "check_row", "check_copies", "check_side_fill"]


def note_side_left_out(features, given) -> bool:
    """Say, in a note, the keys of a batch's items that are neither FORMAT.md's slab columns nor
    side columns `given` to the collator: a packed output's side columns (advantages, log-probs,
    support) it leaves out, every row then trained as SFT whatever its values (S46B-4). Whether
    it said one."""
    from packtool.slabs.schema import SCHEMA
    known = set(SCHEMA.names) | {c.name if hasattr(c, "name") else str(c) for c in given}
    first = features[0] if features and isinstance(features[0], Mapping) else {}
    left = [k for k in first if k not in known]
    if left:
        from packtool.notes import note
        note(f"SlabCollator: the slabs carry side column(s) {', '.join(left)}, which this collator leaves out of "
             f"the batch (not in its side_columns): the loss uses none of them (every row is trained as SFT, "
             f"whatever its values); pass SlabCollator(side_columns=ds.side_columns) to have them as batch keys "
             f"for an RL loss (docs/RL.md)")
    return bool(left)
