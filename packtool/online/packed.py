"""In-memory sequences -> one packed micro-batch's tensors for one CP rank, without megatron.

`pack_tensors` lays the sequences out with `layout.compute_layout` under the run's
`Alignment` (fixed length included), scatters tokens, loss mask and every side column into
the padded slab on the tokens' device (`layout.token_destinations` / `place_tokens`),
shifts targets and side columns with `layout.shift_like_labels` over the FULL slab's
segments, then cuts the CP zigzag slice (`layout.cp_rank_index`). `online.thd.thd_batch`
wraps the result in megatron's `ThdBatch`; trainers without megatron (FSDP, plain torch,
the RL loss of docs/RL.md) use it as it is. Needs torch.
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from numbers import Real
from typing import Any, Sequence

import numpy as np
import torch

from packtool.align import Alignment
from packtool.layout import (
    compute_layout,
    cp_rank_index,
    place_tokens,
    positions_in_segment,
    segment_of_position,
    shift_like_labels,
    token_destinations,
)
from packtool.errors import PacktoolConfigError, one_line
from packtool.integers import INT32_MAX, short
from packtool.kernels.args import FLOATS
from packtool.params import expect, torch_device
from packtool.side import name_problem, shift_clash
from packtool.online.room import check_slab
from packtool.online.step import OnlinePackError, as_lengths, check_int


@dataclass
class PackedTensors:
    """One micro-batch on one CP rank; token tensors are 1-D [t_local] (or [t_local, K])."""

    input_ids: torch.Tensor  # int64, pad_id on pads
    position_ids: torch.Tensor  # int64, position inside the segment
    labels: torch.Tensor  # int64, labels[p] = input_ids[p+1] in the segment; 0 where weight is 0
    loss_weight: torch.Tensor  # float32, 1 where position p predicts a trained token
    segment: torch.Tensor  # int64, segment of each position (pads: the one they follow)
    index: torch.Tensor  # int64, slab position of each local position (the CP zigzag)
    seg_len: np.ndarray  # int64 per segment of the full slab (a fill segment has 0)
    seg_padded: np.ndarray  # int64 per segment: physical length
    num_tokens: int  # real tokens of the full micro-batch (all CP ranks)
    num_loss_tokens: int  # loss tokens of the full micro-batch (all CP ranks)
    seg_loss_tokens: torch.Tensor  # float32 [n_seg], loss tokens per segment (all CP ranks)
    side: dict = field(default_factory=dict)  # token-aligned, as given
    side_targets: dict = field(default_factory=dict)  # shifted like labels
    # float side columns holding NaN / +-inf values (kept as given: they make a PPO loss NaN):
    # name -> {"nan", "inf", "first": {"sequence", "token", "value"}}, as pack's --json side_nonfinite
    side_nonfinite: dict = field(default_factory=dict)

    @property
    def cu_seqlens_padded(self) -> np.ndarray:
        return np.concatenate(([0], np.cumsum(self.seg_padded)))


def _flat(x, lengths, what: str, lens_like=None):
    """(flat tensor with tokens on axis 0, int64 lengths) from a list of per-sequence
    tensors or one flat tensor with `lengths`; none on the meta device."""
    flat, lens = _flat_any(x, lengths, what, lens_like)
    if flat.is_meta:  # its values cannot be read: torch would say "Cannot copy out of meta tensor"
        raise OnlinePackError(f"{what} is on the meta device (a tensor without data): pass tensors that "
                              f"hold the values, on the CPU or the trainer's device")
    return flat, lens


def _flat_any(x, lengths, what: str, lens_like=None):
    if isinstance(x, torch.Tensor):
        if lengths is None:
            raise OnlinePackError(f"{what} is one flat tensor: pass lengths= (one per sequence)")
        lens = np.asarray(lengths, np.int64).reshape(-1)
        if x.dim() == 0 or int(lens.sum()) != x.shape[0]:
            raise OnlinePackError(f"{what} has {x.shape[0] if x.dim() else 0} tokens but lengths "
                                  f"sum to {int(lens.sum())}: pass one length per sequence")
        return x, lens
    seqs = _tensors(x, what)
    if not seqs:
        raise OnlinePackError(f"{what}: no sequences (a micro-batch needs at least one)")
    if lens_like is not None:
        _one_kind(seqs, what)
    if lens_like is None:  # tokens and masks: [T] or [1, T] (a tokenizer's batch of one), flattened
        wide = next((i for i, t in enumerate(seqs) if sum(d > 1 for d in t.shape) > 1), None)
        if wide is not None:
            raise OnlinePackError(f"{what}[{wide}] has shape {tuple(seqs[wide].shape)}: one 1-D tensor per "
                                  f"sequence; a padded [B, T] batch is B sequences: pass its rows with the "
                                  f"padding removed")
        seqs = [t.reshape(-1) for t in seqs]
    lens = np.fromiter((t.shape[0] if t.dim() else 1 for t in seqs), np.int64, len(seqs))
    return torch.cat([t.reshape(t.shape if t.dim() else (1,)) for t in seqs]), lens


def _tensors(x, what: str) -> list:
    """One tensor per sequence; a value torch cannot make a tensor of (a ragged list, a
    string, a number in place of the list) is one line naming the argument, not torch's."""
    try:
        return [torch.as_tensor(t) for t in x]
    except (RuntimeError, TypeError, ValueError, OverflowError) as e:
        raise OnlinePackError(f"{what} is not one tensor per sequence ({one_line(e)}): pass a list "
                              f"of tensors, one per sequence, or one flat tensor with lengths=") from None


def _one_kind(seqs: list, what: str) -> None:
    """A side column's sequences share rank, width and dtype: torch.cat says a rank or K
    mismatch in its own words (no column, no sequence) and silently promotes mixed dtypes
    (int64 ids through float32 lose digits above 2^24)."""
    shapes = [tuple(t.shape) if t.dim() else (1,) for t in seqs]
    for k, (t, sh) in enumerate(zip(seqs, shapes)):
        if len(sh) > 2:
            raise OnlinePackError(f"{what}: sequence {k} has shape {sh}: one scalar or one K-wide row per "
                                  f"token ([L] or [L, K])")
        if len(sh) != len(shapes[0]) or sh[1:] != shapes[0][1:]:
            raise OnlinePackError(f"{what}: sequence {k} has shape {sh} but sequence 0 has {shapes[0]}: give "
                                  f"every sequence [L] (one value per token) or every one [L, K] with the same K")
        if t.dtype != seqs[0].dtype:
            raise OnlinePackError(f"{what}: sequence {k} is {t.dtype} but sequence 0 is {seqs[0].dtype}: give "
                                  f"every sequence of a column one dtype (concatenating would promote it)")


_WIDE_UNSIGNED = tuple(getattr(torch, n) for n in ("uint16", "uint32", "uint64") if hasattr(torch, n))


def _integer_ids(input_ids, lengths) -> None:
    """Token ids and lengths are integers: the int64 cast would truncate a float (1.7 -> 1)."""
    if lengths is not None:
        as_lengths(lengths, "lengths")  # refuses a float length, names it
    seqs = [input_ids] if isinstance(input_ids, torch.Tensor) else input_ids
    for i, t in enumerate(seqs):
        try:
            dt = t.dtype if isinstance(t, torch.Tensor) else torch.as_tensor(t).dtype
        except (RuntimeError, TypeError, ValueError, OverflowError) as e:  # 10**19, ragged lists
            raise OnlinePackError(f"input_ids[{i}] is not a tensor of token ids ({one_line(e)}): pass "
                                  f"integer ids from 0 to 2^63-1 (torch.long)") from None
        where = "input_ids" if isinstance(input_ids, torch.Tensor) else f"input_ids[{i}]"
        if dt in _WIDE_UNSIGNED:  # by dtype: torch computes little on them, and uint64 past 2^63 wraps in int64
            raise OnlinePackError(f"{where} is a {dt} tensor: token ids are read as torch.long (ids past 2^63-1 "
                                  f"would wrap to negatives); pass ids from 0 to 2^63-1 as torch.long or int32")
        if dt.is_floating_point or dt.is_complex or dt == torch.bool:
            raise OnlinePackError(f"{where} is a {dt} tensor: token ids must be integers (the cast "
                                  f"to int64 would truncate 1.7 to 1); pass integer ids (torch.long)")


def _fill(name: str, value, dtype: torch.dtype):
    """side_fill[name] when the column's dtype holds it exactly: a NaN/inf on every pad turns
    a `mask * value` loss into NaN, 0.5 in an int column is cut to 0 and True to 1 (the
    writer only ever fills 0.0 or -1, FORMAT.md)."""
    said = f"side_fill[{name!r}]"
    if dtype.is_floating_point:
        top = float(torch.finfo(dtype).max)
        try:
            ok = (isinstance(value, Real) or (isinstance(value, torch.Tensor) and value.dim() == 0)) \
                and not isinstance(value, bool) and abs(float(value)) <= top  # False for NaN, inf, '1.0'
        except (TypeError, ValueError, OverflowError):
            ok = False
        if not ok:
            raise OnlinePackError(f"{said} must be a finite number the column's {dtype} holds "
                                  f"(|x| <= {top:g}), got {short(value)}; the default is 0.0")
        return float(value)
    if dtype == torch.bool:  # False/True as given, 0/1 as integers
        return bool(value) if isinstance(value, (bool, np.bool_)) else bool(check_int(said, value, 0, maximum=1))
    info = torch.iinfo(dtype)
    return check_int(said, value, info.min, maximum=info.max)  # 2^40 in int32, 0.5, True refused


_SIGNED = (torch.int8, torch.int16, torch.int32, torch.int64)
_NEEDS_FILL = (torch.bool, torch.uint8)  # placed, but the default -1 would wrap (True, 255)


def _column_fill(name: str, dtype: torch.dtype, given):
    """The pad value of side column `name`: packtool.side.SideColumn's defaults (0.0 for
    floats, -1 for ints) where the dtype holds them; a bool or uint8 column needs its fill
    given (-1 became True / 255 on every pad); complex, float8, the wider unsigned and the
    quantized dtypes are refused (torch cannot scatter some, and no loss reads the rest)."""
    if dtype in FLOATS or dtype in _SIGNED:  # float8 is floating point, yet torch counts no NaN in it
        return (0.0 if dtype.is_floating_point else -1) if given is None else _fill(name, given, dtype)
    cast = "cast it (.to(torch.int32): pads -1, or .float(): pads 0.0)"
    if dtype in _NEEDS_FILL:
        if given is None:
            was, fill, held = ("True", "False", "False or True") if dtype == torch.bool else ("255", "0", "0..255")
            raise OnlinePackError(f"side column {name!r} is {dtype}, which does not hold the default pad "
                                  f"fill -1 (it would become {was}): pass side_fill={{{name!r}: {fill}}} "
                                  f"({held}), or {cast}")
        return _fill(name, given, dtype)
    raise OnlinePackError(f"side column {name!r} is {dtype}: side columns are float (float16, bfloat16, "
                          f"float32, float64), signed int (int8..int64), or bool/uint8 with a side_fill: {cast}")


def _side(side: dict, side_fill: dict, lens: np.ndarray, lengths, device) -> dict:
    """name -> (flat values on device, fill); one line names the column and sequence that
    does not have one value (or one K-row) per token, and a side_fill key that names no
    column (a typo would leave the pads at the default fill without a word)."""
    for what, d in (("side", side), ("side_fill", side_fill)):
        if not isinstance(d, Mapping):
            raise OnlinePackError(f"{what} must be a dict of column name -> {'tensors' if what == 'side' else 'fill'}"
                                  f", got {type(d).__name__} {short(d)}")
    # pack --side-columns' rule, each name and the shift_NAME pair: a later save of these rollouts
    # through pack takes the names
    for name, why in [(n, name_problem(n)) for n in side] + [shift_clash(side) or (None, None)]:
        if why:
            raise OnlinePackError(f"side[{short(name)}] is not a usable side column name: {why} "
                                  f"(the rule of pack's side columns, so that these rollouts can be saved under it)")
    stray = sorted(map(str, set(side_fill) - set(side)))
    if stray:
        raise OnlinePackError(f"side_fill names {stray[0]!r}, not a side column (side= holds "
                              f"{sorted(map(str, side)) or 'none'}): give a fill only for a column in side=")
    out = {}
    for name, x in side.items():
        v, vl = _flat(x, lengths, f"side column {name!r}", lens_like=lens)
        if vl.size != lens.size or not np.array_equal(vl, lens):
            k = int(np.flatnonzero(vl != lens)[0]) if vl.size == lens.size else None
            where = (f"sequence {k} has {int(vl[k])} values for {int(lens[k])} tokens" if k is not None
                     else f"{vl.size} sequences for {lens.size}")
            raise OnlinePackError(f"side column {name!r}: {where}; give one value (or one K-wide row) "
                                  f"per token of input_ids")
        if v.dim() > 2:
            raise OnlinePackError(f"side column {name!r} has shape {tuple(v.shape)}: one scalar or one "
                                  f"K-wide row per token")
        if v.dim() == 2 and v.shape[1] == 0:  # the kernels and `pack --side-columns` refuse K=0 alike
            raise OnlinePackError(f"side column {name!r} (side[{name!r}]) has shape {tuple(v.shape)}: 0 values per "
                                  f"token; a K-wide row needs K >= 1: give [L] or [L, K >= 1], or leave the "
                                  f"column out of side=")
        out[name] = (v.to(device), _column_fill(name, v.dtype, side_fill.get(name)))
    return out


def _mask(loss_mask, lengths, lens: np.ndarray, device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(float32 0/1 weights on device, per-token "not 0 and not 1" flags or None). The mask
    says target or not: a soft weight (0.5, 2.0), HF's -1/-100 "ignore" or a NaN cast to
    != 0 would train on it as a plain target, so such values are refused, not flattened;
    the flags are read in the micro-batch's one host sync (`_one_sync`)."""
    if loss_mask is None:
        return torch.ones(int(lens.sum()), dtype=torch.float32, device=device), None
    mask, mlens = _flat(loss_mask, lengths, "loss_mask")
    if not np.array_equal(mlens, lens):
        raise OnlinePackError("loss_mask must have one entry per token of input_ids "
                              "(same lengths per sequence)")
    mask = mask.reshape(-1).to(device)
    if mask.dtype.is_complex:
        raise OnlinePackError(f"loss_mask is a {mask.dtype} tensor: pass 0/1 per token (bool, integer or float)")
    bad = None if mask.dtype == torch.bool else (mask != 0) & (mask != 1)
    return (mask != 0).to(torch.float32), bad


def _bad_mask(mask_in, lengths, lens: np.ndarray, bad: torch.Tensor) -> OnlinePackError:
    """The one line for the first loss_mask value that is neither 0 nor 1, by sequence."""
    i = int(torch.nonzero(bad)[0])
    k = int(np.searchsorted(np.cumsum(lens), i, side="right"))
    p = i - int(lens[:k].sum())
    flat = mask_in.reshape(-1) if isinstance(mask_in, torch.Tensor) else torch.as_tensor(mask_in[k]).reshape(-1)
    v = flat[i if isinstance(mask_in, torch.Tensor) else p].item()
    where = f"loss_mask (sequence {k})" if isinstance(mask_in, torch.Tensor) else f"loss_mask[{k}]"
    return OnlinePackError(f"{where} holds {v} at position {p}: loss_mask is 0 (not a target) or 1 (a "
                           f"target) per token, as bool, integer or float; pass (mask > 0) for a "
                           f"mask that marks ignored tokens otherwise, and carry real-valued loss "
                           f"weights as a side column (side=)")


def _one_sync(weight: torch.Tensor, lowest: torch.Tensor | None, ids: torch.Tensor,
              bad: torch.Tensor | None, odd: list[torch.Tensor] = ()) -> tuple[int, bool, list[int]]:
    """(loss-token count, whether the mask held a value other than 0/1, the `odd` counts), with
    the lowest token id checked, in one host sync: a second read of a GPU tensor per
    micro-batch would stall the trainer's stream once more. int64: exact for any count."""
    i64 = dict(device=weight.device, dtype=torch.int64)
    vals = [weight.sum().to(**i64)]  # 0/1 weights: a whole number
    vals += [] if lowest is None else [lowest.to(**i64)]
    vals += [] if bad is None else [bad.any().to(**i64)]
    vals += [c.to(**i64) for c in odd]
    got = torch.stack(vals).tolist()
    if lowest is not None and got[1] < 0:  # a negative id is an embedding row of its own, never a token
        i = int(torch.argmin(ids))
        raise OnlinePackError(f"input_ids holds {int(ids[i])} at flat position {i}: token ids are "
                              f"nonnegative integers (pad with pad_id, mask with loss_mask)")
    n = len(vals) - len(odd)
    return int(got[0]), bad is not None and got[n - 1] != 0, got[n:]


def _nonfinite(cols: dict, counts: list[int], lens: np.ndarray) -> dict:
    """The float side columns holding NaN / +-inf (counts: NaN, inf per float column, in
    order), each with its first one's sequence, token and value; said in a warning, since
    the values are kept as given (pack's rule: counted and named where the user looks)."""
    out, parts = {}, []
    floats = [n for n, (v, _) in cols.items() if v.dtype.is_floating_point]
    for name, nan, inf in zip(floats, counts[::2], counts[1::2]):
        if nan or inf:
            v = cols[name][0]
            i = int(torch.nonzero(~torch.isfinite(v.reshape(v.shape[0], -1)).all(dim=1))[0])
            k = int(np.searchsorted(np.cumsum(lens), i, side="right"))
            first = {"sequence": k, "token": i - int(lens[:k].sum()), "value": v[i].tolist()}
            out[name] = {"nan": nan, "inf": inf, "first": first}
            parts.append(f"side column {name!r} holds {nan:,} NaN and {inf:,} +-inf value(s) (first "
                         f"{first['value']} in sequence {k} token {first['token']})")
    if parts:
        warnings.warn("; ".join(parts) + ": kept as given; a NaN log-prob makes a PPO loss NaN "
                      "(PackedTensors / ThdBatch .side_nonfinite; sequences and tokens count from 0)",
                      RuntimeWarning, stacklevel=3)
    return out


def pack_tensors(input_ids: Sequence[torch.Tensor] | torch.Tensor, alignment: Alignment,
                 loss_mask: Sequence[torch.Tensor] | torch.Tensor | None = None, *,
                 side: dict | None = None, side_fill: dict | None = None, lengths=None,
                 cp_rank: int = 0, cp_size: int | None = None, pad_id: int = 0,
                 device: Any = None) -> PackedTensors:
    """The tensors of one packed micro-batch of the given sequences, in order, for CP rank
    cp_rank (arguments as `online.thd.thd_batch`)."""
    expect(alignment, Alignment, "pack_tensors", "alignment")
    _integer_ids(input_ids, lengths)
    ids, lens = _flat(input_ids, lengths, "input_ids")
    ids = ids.reshape(-1)
    lowest = ids.min() if ids.numel() else None  # read in the micro-batch's one host sync, below
    device = ids.device if device is None else torch_device("device", device, OnlinePackError)
    mask, bad = _mask(loss_mask, lengths, lens, device)
    if lens.size and not int(lens.sum()):  # pack_step's ffd/least-loaded place empty rollouts (as SkyRL)
        raise OnlinePackError(f"the {lens.size} sequence(s) hold no token: a zero-loss micro-batch; skip it "
                              f"(thd_batches gives None for it), or drop empty rollouts before pack_step")
    cols = _side(side or {}, side_fill or {}, lens, lengths, device)
    cp = alignment.cp if cp_size is None else check_int("cp_size", cp_size, 1, maximum=INT32_MAX)
    pad_id = check_int("pad_id", pad_id, 0)
    if check_int("cp_rank", cp_rank, 0) >= cp:
        raise OnlinePackError(f"cp_rank must be in 0..{cp - 1} for cp={cp}, got {cp_rank}")
    if cp > 1 and alignment.s % (2 * cp):  # the zigzag cuts every segment into 2*cp chunks (packtool.layout)
        raise PacktoolConfigError(f"alignment is for cp={alignment.cp} (segments padded to multiples of "
                                  f"{alignment.s}) but the batch is cut for cp_size={cp} (given, or cp_group's "
                                  f"size), which needs multiples of {2 * cp}: pass Alignment(cp={cp}, ...), the "
                                  f"CP you train with (or neither cp_size nor cp_group, to train without CP)")
    lay = compute_layout(lens, np.array([0, lens.size]), alignment)
    T = int(lay.slab_len[0])
    check_slab(T, alignment, sum(v.element_size() * (v.shape[1] if v.dim() == 2 else 1)
                                 for v, _ in cols.values()), device)
    start = lay.seg_start[~lay.is_fill]
    dst = token_destinations(lens, start, like=mask)
    full_ids = place_tokens(ids.to(device=device, dtype=torch.int64), dst, T, int(pad_id))
    weight_in = place_tokens(mask, dst, T, 0.0)
    weight_in[torch.as_tensor(start[lens > 0], device=device)] = 0.0  # FORMAT.md: first token: no target (an empty rollout has none)
    cu_pad = np.concatenate(([0], np.cumsum(lay.seg_padded)))
    labels = shift_like_labels(full_ids, cu_pad, 0)
    weight = shift_like_labels(weight_in, cu_pad, 0.0)
    labels = labels * (weight != 0)
    seg = torch.as_tensor(segment_of_position(lay.seg_padded), device=device)
    seg_loss = torch.zeros(lay.seg_padded.size, dtype=torch.float32, device=device).index_add_(0, seg, weight)
    odd = [c for v, _ in cols.values() if v.dtype.is_floating_point for c in (torch.isnan(v).sum(), torch.isinf(v).sum())]
    n_loss, mask_bad, counts = _one_sync(weight, lowest, ids, bad, odd)  # the full micro-batch's (all CP ranks)
    if mask_bad:
        raise _bad_mask(loss_mask, lengths, lens, bad)
    nonfinite = _nonfinite(cols, counts, lens)
    pos = torch.as_tensor(positions_in_segment(lay.seg_padded), device=device)
    stored, shifted = {}, {}
    for name, (v, fill) in cols.items():
        stored[name] = place_tokens(v, dst, T, fill)
        shifted[name] = shift_like_labels(stored[name], cu_pad, fill)
    idx = torch.arange(T, device=device)
    if cp > 1:
        idx = torch.as_tensor(cp_rank_index(cu_pad[:-1], lay.seg_padded, cp, cp_rank), device=device)
        full_ids, labels, weight, pos, seg = full_ids[idx], labels[idx], weight[idx], pos[idx], seg[idx]
        stored = {k: v[idx] for k, v in stored.items()}
        shifted = {k: v[idx] for k, v in shifted.items()}
    return PackedTensors(input_ids=full_ids, position_ids=pos, labels=labels, loss_weight=weight,
                         segment=seg, index=idx, seg_len=lay.seg_len, seg_padded=lay.seg_padded,
                         num_tokens=int(lens.sum()), num_loss_tokens=n_loss, seg_loss_tokens=seg_loss,
                         side=stored, side_targets=shifted, side_nonfinite=nonfinite)
