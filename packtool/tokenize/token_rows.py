"""Pre-tokenized rows (`input_ids`, optional loss columns: `loss_mask`, `assistant_masks`,
`completion_mask`, `labels` (shape_detect.LOSS_COLUMNS), optional `attention_mask`) -> an EncodedBatch.

Rows stay columnar: flat values + offsets straight from Arrow. What is not exactly a list of
integers is an error naming the file, the row (counted from the file's start) and the fix:
a column that is not a list, null rows, booleans in an id column (a mask under the wrong name),
ids that are floats with a fraction, NaN or infinite, or out of the vocabulary. Floats that are whole numbers (`[1.0, 2.0]`, as some
writers store ids) are taken as those integers: nothing changes. A mask (a loss column but
`labels`, `attention_mask`) holds 0/1 (or true/false) only: a -1 or a 2 is no mask value packtool could
read without guessing. An `attention_mask` 0 marks padding (Hugging Face `padding=...` output):
packing it would train on pad tokens, so such a row is refused (docs/TOKENIZATION.md).
"""
from __future__ import annotations

import numba
import numpy as np
import pyarrow as pa

from packtool.arrays import list_view_said, np_of
from packtool.errors import PacktoolInputError, arg
from packtool.integers import TOKEN_ID_BOUND
from packtool.tokenize.encode import EncodedBatch, no_target
from packtool.tokenize.row_checks import TRL_MASKS, valid_values
from packtool.tokenize.shape_detect import LOSS_COLUMNS, Shape


def _row_of(lens: np.ndarray, flat_pos: int) -> int:
    return int(np.searchsorted(np.cumsum(lens), flat_pos, side="right"))


def _pos_in_row(lens: np.ndarray, flat_pos: int) -> tuple[int, int]:
    """(row, token within the row) of a flat position."""
    r = _row_of(lens, flat_pos)
    return r, flat_pos - int(np.sum(lens[:r], dtype=np.int64))


# 0/1 columns: any other value is refused, never cast
MASKS = tuple(c for c in LOSS_COLUMNS if c != "labels") + ("attention_mask",)


def shown_value(v, kind: str):
    """A value of a number column as a message shows it: one beyond int64 was read as a float
    by the JSON reader (the file holds an integer), whose repr (`1e+23`) is no value the file holds."""
    if kind == "f" and np.isfinite(v) and abs(float(v)) >= 2.0 ** 63:
        return f"a number beyond int64's range ({'-' if v < 0 else ''}2**63 or more, read as a float)"
    return repr(float(v)) if kind == "f" else int(v)


def _refuse_non_binary(flat: np.ndarray, lens: np.ndarray, name: str, path: str, first_row: int) -> None:
    """A mask value other than 0/1 (-1 as an "ignore" sentinel, 2 as a weight, 0.5) read as
    `!= 0` would silently put loss (or attention) where the writer meant something else."""
    bad = np.flatnonzero((flat != 0) & (flat != 1))
    if bad.size:
        r, t = _pos_in_row(lens, int(bad[0]))
        v = flat[bad[0]]
        shown = shown_value(v, flat.dtype.kind)
        raise PacktoolInputError(f"{name}[{t}] is {shown}: a mask holds 0 or 1 (or false/true) only; rewrite "
                                 f"the column as 0/1 (1 where the token counts) (tokens count from 0)",
                                 path=path, row=first_row + r)


def _list_values(batch: pa.RecordBatch, name: str, path: str, first_row: int):
    """(flat numpy values, int32 row lengths) of a list-of-numbers column."""
    col = batch.column(name)
    t = col.type
    if pa.types.is_null(t):  # a batch whose every row lacks the column: nulls, judged below
        col = pa.nulls(len(col), pa.list_(pa.int32()))
        t = col.type
    if list_view_said(t):
        raise PacktoolInputError(f"{name} holds {t}: {list_view_said(t)}", path=path, row=first_row)
    if not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)):
        raise PacktoolInputError(f"{name} holds {t}, not a list of integers per row; write each "
                                 f"row's ids as a list", path=path, row=first_row)
    vt = t.value_type
    if not (pa.types.is_integer(vt) or pa.types.is_floating(vt) or pa.types.is_boolean(vt)
            or pa.types.is_null(vt)):
        raise PacktoolInputError(f"{name} holds lists of {vt}, not integers; write the ids as "
                                 f"integers", path=path, row=first_row)
    if pa.types.is_boolean(vt) and name not in MASKS:
        # true/false where ids belong is a mask saved under the wrong name: read as ids 1/0, every
        # row became a run of tokens 0 and 1, trained on (S45A-4)
        what = ("the token ids" if name == "input_ids" else
                "the labels (each its token's id, -100 where the loss skips it)")
        raise PacktoolInputError(f"{name} holds lists of bool, not integers: true/false is a mask (loss_mask, "
                                 f"attention_mask) saved under the name {name}; write {what} as integers, "
                                 f"a true/false mask as loss_mask", path=path, row=first_row)
    if col.null_count:
        # A row whose input_ids is null or missing is an empty example, as [] is, for --on-empty
        # to judge as in every shape (docs/TOKENIZATION.md); its other columns are as absent.
        ids = batch.column("input_ids")
        stray = ~valid_values(col) & valid_values(ids)
        if stray.any():
            raise PacktoolInputError(f"{name} is null: give the row its list (one value per token) or drop the "
                                     f"row", path=path, row=first_row + int(np.flatnonzero(stray)[0]))
        import pyarrow.compute as pc  # only for a batch with such rows: the import costs
        if pa.types.is_fixed_size_list(t):  # no empty list of a fixed size
            t = pa.list_(t.value_type)
            col = col.cast(t)
        col = pc.fill_null(col, pa.scalar([], t))
    if pa.types.is_fixed_size_list(t):
        values = col.flatten()
        lens = np.full(len(col), t.list_size, np.int32)
    else:
        offs = np_of(col.offsets)  # the rows' span of the child array (slices respected)
        lens = np.diff(offs).astype(np.int32)
        values = col.values.slice(int(offs[0]), int(offs[-1] - offs[0])) if len(offs) else col.values.slice(0, 0)
    if values.null_count:
        pos = int(np.nonzero(values.is_null().to_numpy(zero_copy_only=False))[0][0])
        raise PacktoolInputError(f"{name} holds a null value inside a row; remove it",
                                 path=path, row=first_row + _row_of(lens, pos))
    flat = np_of(values)  # not to_numpy: that imports pandas (packtool/arrays.py)
    if name in MASKS and flat.dtype.kind != "b":
        _refuse_non_binary(flat, lens, name, path, first_row)
    if flat.dtype.kind == "f":
        frac = ~np.isfinite(flat) | (flat != np.floor(flat))
        if frac.any():
            pos = int(np.nonzero(frac)[0][0])
            raise PacktoolInputError(f"{name} holds {float(flat[pos])!r}, not an integer (floats are "
                                     f"not truncated); write the ids as integers", path=path,
                                     row=first_row + _row_of(lens, pos))
    return flat, lens


@numba.njit(nogil=True, cache=True)
def first_outside(flat, top):
    """Index of the first value outside 0..top-1, or -1 (one pass, no temporaries)."""
    for i in range(flat.size):
        if flat[i] < 0 or flat[i] >= top:
            return i
    return -1


def tokens_batch(batch: pa.RecordBatch, shape: Shape, vocab_size: int | None,
                 path: str, first_row: int, lean: bool = False) -> EncodedBatch:
    """`lean`: a batch without a mask column gets mask None (every token a target) instead
    of a uint8 one per token (tokenize_to_cache's writers take None)."""
    flat, lens = _list_values(batch, "input_ids", path, first_row)
    top = vocab_size or TOKEN_ID_BOUND
    if flat.size:
        if flat.dtype.kind in "iu":
            bad = first_outside(flat, top)
        else:
            out = (flat < 0) | (flat >= top)
            bad = int(np.nonzero(out)[0][0]) if out.any() else -1
        if bad >= 0:  # the value and its place: one id among millions is found by them alone
            r, t = _pos_in_row(lens, int(bad))
            v = shown_value(flat[bad], flat.dtype.kind)
            fix = (f"outside the tokenizer's vocabulary 0..{top - 1}: give the {arg('tokenizer')} the ids were made with, "
                   f"or fix the ids" if vocab_size else f"outside 0..{top - 1} (a token id is a non-negative int32): "
                   f"fix the ids")
            raise PacktoolInputError(f"input_ids[{t}] is {v}, {fix} (tokens count from 0)", path=path,
                                     row=first_row + r)
    ids = flat.astype(np.int32)
    if "attention_mask" in shape.columns:
        _refuse_padding(_same_lengths(batch, "attention_mask", lens, path, first_row), lens, path, first_row)
    extra = [c for c in shape.columns[1:] if c in LOSS_COLUMNS]
    if extra:
        said = {}
        for name in extra:
            mv = _same_lengths(batch, name, lens, path, first_row)
            said[name] = ((mv != -100) if name == "labels" else (mv != 0), mv)
            if name == "labels":
                _labels_are_the_ids(mv, flat, said[name][0], lens, path, first_row)
        said = as_trl_trains(said)
        if len(said) > 1:
            _loss_sources_agree(said, lens, path, first_row)
        mask = next(iter(said.values()))[0].astype(np.uint8)
    else:
        mask = None if lean else np.ones(ids.size, np.uint8)
    return EncodedBatch(ids, mask, lens, lens == 0, no_target(mask, lens, bool(extra)))


def _same_lengths(batch: pa.RecordBatch, name: str, lens: np.ndarray, path: str, first_row: int) -> np.ndarray:
    mv, mlens = _list_values(batch, name, path, first_row)
    if not np.array_equal(mlens, lens):
        row = int(np.nonzero(mlens != lens)[0][0])
        n = int(mlens[row])
        raise PacktoolInputError(f"{name} holds {n} value{'s' if n != 1 else ''} but input_ids {int(lens[row])}: give "
                                 f"{name} one value per token of the row", path=path, row=first_row + row)
    return mv


def _refuse_padding(attn: np.ndarray, lens: np.ndarray, path: str, first_row: int) -> None:
    """attention_mask 0 is padding the model must not see: packed, it would be real tokens (with
    loss). Dropping it here would change the rows' lengths behind the user's back; refused."""
    pad = np.flatnonzero(attn == 0)
    if pad.size:
        r, t = _pos_in_row(lens, int(pad[0]))
        raise PacktoolInputError(
            f"attention_mask[{t}] is 0: the row holds padding (e.g. tokenizer(..., padding=...)), which packtool "
            f"would pack as real tokens with loss; tokenize without padding, or keep only the positions where "
            f"attention_mask is 1 (in input_ids and loss_mask/labels) and pack that (tokens count from 0)",
            path=path, row=first_row + r)


TRL_BOTH = "(assistant_masks AND completion_mask)"


def as_trl_trains(said: dict) -> dict:
    """TRL writes both masks for a conversational prompt-completion row under assistant_only_loss,
    completion_mask 1 over the whole completion (its role header too), assistant_masks 1 inside the
    template's generation blocks, and trains where both are 1 (trl's SFTTrainer: a label is kept
    where every mask given is 1). They differ on the header by construction, so they are not two
    spellings of one mask to hold to each other (RA-16): read as one source, their AND, held to any
    other loss column as each was. `said`: {column: (targets, values)} in LOSS_COLUMNS' order."""
    if not all(n in said for n in TRL_MASKS):
        return said
    both = said["assistant_masks"][0] & said["completion_mask"][0]
    return {(TRL_BOTH if n == TRL_MASKS[0] else n): ((both, both.astype(np.uint8)) if n == TRL_MASKS[0] else v)
            for n, v in said.items() if n != TRL_MASKS[1]}


def _loss_sources_agree(said: dict, lens: np.ndarray, path: str, first_row: int) -> None:
    """A row giving two loss columns (`loss_mask` and `labels`, `assistant_masks` and
    `completion_mask`, ...) says twice which tokens are targets: where two disagree, reading either
    would drop what the other says without a word (S44-1). Read all only to hold each to the first,
    whose targets are the loss (LOSS_COLUMNS' order)."""
    names = list(said)
    m, mv = said[names[0]]
    # a row's first token is never a target in a slab (FORMAT.md, loss_mask): there they may differ
    starts = (np.cumsum(lens) - lens)[lens > 0]
    for other in names[1:]:
        lb, lv = said[other]
        differ = m != lb
        differ[starts] = False
        off = np.flatnonzero(differ)
        if off.size:
            p = int(off[0])
            r, t = _pos_in_row(lens, p)
            raise PacktoolInputError(f"{names[0]}[{t}] is {int(mv[p])} but {other}[{t}] is {int(lv[p])}: the row gives "
                                     f"both columns and they disagree on whether token {t} is a target; drop the "
                                     f"column that is wrong (packtool reads either alone) (tokens count from 0)",
                                     path=path, row=first_row + r)


def _labels_are_the_ids(labels: np.ndarray, ids: np.ndarray, kept: np.ndarray, lens: np.ndarray, path: str,
                        first_row: int) -> None:
    """packtool reads `labels` as Hugging Face models take them: the ids themselves, -100
    where the loss skips a token. Labels shifted by one (or anything else) would move every
    loss position silently: one line instead."""
    wrong = np.flatnonzero(kept & (labels != ids))
    if wrong.size:
        p = int(wrong[0])
        r, t = _pos_in_row(lens, p)
        raise PacktoolInputError(f"labels[{t}] is {int(labels[p])} but input_ids[{t}] is {int(ids[p])}: packtool reads "
                                 f"labels unshifted (the ids, -100 where the loss skips a token, as Hugging Face "
                                 f"models take them); shifted labels would move every loss position one token: "
                                 f"unshift them, or give a 0/1 loss_mask column instead (tokens count from 0)",
                                 path=path, row=first_row + r)
