"""`SlabCollator`: slab items in, one padding-free batch [1, T] out (transformers'
`DataCollatorWithFlattening` form, the package docstring's rules), its options checked when it
is built; `needs_4d_mask`, whether a model needs the 4D mask to keep segments apart.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from packtool.errors import PacktoolConfigError, PacktoolInputError
from packtool.free_memory import failed_allocation, out_of_memory
from packtool.hf.features import slab_features, slab_side_features
from packtool.hf.mask import block_causal_mask
from packtool.hf.rows import FIX, check_copies, check_row, check_side_fill, note_side_left_out
from packtool.integers import short
from packtool.params import names, switch
from packtool.side import SideColumn, per_token, side_values

SLAB_KEYS = ("input_ids", "loss_mask", "seq_lens", "cu_seqlens_padded")  # what a batch item must hold


@dataclass
class SlabCollator:
    """Slabs -> one padding-free batch [1, T] (the slabs of a batch one after another).

    Features are `SlabDataset` items or raw slab rows with the same columns, e.g. from
    `datasets.load_dataset("parquet", data_dir=OUT)` (with `remove_unused_columns=False`).
    flash_kwargs: also return `cu_seq_lens_q/k` and `max_length_q/k` (flash attention reads
      them instead of deriving them from `position_ids`).
    seq_idx: also return `seq_idx`, the segment of every token (Mamba-style kernels).
    mask_4d: also return a [1, 1, T, T] additive block-diagonal causal `attention_mask` of
      `mask_dtype` (a floating dtype), for sdpa/eager on transformers that do not read packing
      from positions; T x T elements per batch: one that cannot fit is refused naming mask_4d.
    side_columns: the output's side columns (`SlabDataset.side_columns`, or names, a list or
      one comma-separated str, each once; a name's
      fill is then 0.0 for floats, -1 for ints). Each becomes two batch keys, [1, T] or
      [1, T, K], on the positions `input_ids` keeps: NAME as stored (token-aligned, like
      `labels`, which the model shifts) and shift_NAME shifted like labels (target-aligned,
      like transformers' `shift_labels`: shift_NAME[p] pairs with the logits at p), the fill
      at every segment's last position (docs/RL.md). Pop them before `model(**batch)`.
    """

    keep_pads: bool = False
    flash_kwargs: bool = False
    seq_idx: bool = False
    mask_4d: bool = False
    mask_dtype: Any = None  # torch dtype of the 4D mask (default float32)
    side_columns: Sequence[SideColumn | str] = ()

    def __post_init__(self):
        # checked here, not at the first batch: inside a Trainer that is after the model loaded
        for k in ("keep_pads", "flash_kwargs", "seq_idx", "mask_4d"):
            setattr(self, k, switch(k, getattr(self, k), PacktoolConfigError))
        self.mask_dtype = _mask_dtype(self.mask_dtype)
        self.side_columns = _side_columns(self.side_columns)
        self._batch_keys()

    def _batch_keys(self) -> set[str]:
        """The keys a batch gets before its side columns; a side column (or its shift_) on one
        of them, or on another side column's, would overwrite it."""
        keys = {"input_ids", "labels", "position_ids", "use_cache"}
        keys |= {"cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k"} if self.flash_kwargs else set()
        keys |= {"seq_idx"} if self.seq_idx else set()
        keys |= {"attention_mask"} if self.mask_4d else set()
        for c in self.side_columns:
            name = c.name if isinstance(c, SideColumn) else c
            for key in (name, f"shift_{name}"):
                if key in keys:
                    raise PacktoolConfigError(f"side_columns: {name!r} would overwrite the batch key {key!r}; "
                                              f"rename the column at pack time (`packtool pack --side-columns`)")
                keys.add(key)
        return keys

    def __call__(self, features: Sequence[dict]) -> dict:
        _check_items(features)
        try:
            return self._collate(features)
        except (MemoryError, RuntimeError) as e:  # numpy's MemoryError, torch's CPU allocator's RuntimeError
            if failed_allocation(e) is None:
                raise
            tokens = sum(len(f["input_ids"]) if hasattr(f["input_ids"], "__len__") else 0 for f in features)
            mask = ", or mask_4d=False (flash attention: the 4D mask grows with T squared)" if self.mask_4d else ""
            raise out_of_memory(e, "SlabCollator", f"collating a batch of {len(features)} slab(s), {tokens:,} tokens",
                                "the data", f"raise the limit), or fewer slabs per batch "
                                f"(per_device_train_batch_size){mask}") from None

    def _collate(self, features: Sequence[dict]) -> dict:
        import torch
        parts = [slab_features(f["input_ids"], f["loss_mask"], f["seq_lens"],
                               f["cu_seqlens_padded"], self.keep_pads) for f in features]
        for f in features:  # seq_lens held by slab_features: the row's other copies of its layout
            check_copies(f, np.asarray(f["seq_lens"], np.int64))
        ids = np.concatenate([p[0] for p in parts])
        labels = np.concatenate([p[1] for p in parts])
        lens = np.concatenate([p[2] for p in parts])
        if ids.size == 0:
            raise PacktoolInputError("SlabCollator: the batch's slabs hold no tokens")
        cu = np.concatenate(([0], np.cumsum(lens)))
        pos = np.arange(ids.size) - np.repeat(cu[:-1], lens)
        out = {"input_ids": torch.from_numpy(ids)[None], "labels": torch.from_numpy(labels)[None],
               "position_ids": torch.from_numpy(pos)[None], "use_cache": False}
        if self.flash_kwargs:
            out["cu_seq_lens_q"] = out["cu_seq_lens_k"] = torch.from_numpy(cu.astype(np.int32))
            out["max_length_q"] = out["max_length_k"] = int(lens.max())
        seg = np.repeat(np.arange(lens.size), lens)
        if self.seq_idx:
            out["seq_idx"] = torch.from_numpy(seg.astype(np.int32))[None]
        if self.mask_4d:
            out["attention_mask"] = block_causal_mask(seg, self.mask_dtype or torch.float32)
        for c in self.side_columns:
            self._add_side(out, features, c)
        if not getattr(self, "_said_side", False):  # once per collator, as packtool train says it once per run
            self._said_side = note_side_left_out(features, self.side_columns)
        return out

    def _add_side(self, out: dict, features: Sequence[dict], c: SideColumn | str) -> None:
        import torch
        name = c.name if isinstance(c, SideColumn) else str(c)
        if name in out or f"shift_{name}" in out:
            raise PacktoolInputError(f"SlabCollator: side column {name!r} would overwrite the batch key "
                                     f"{name if name in out else 'shift_' + name!r}; rename the column at pack time")
        if any(name not in f for f in features):
            raise PacktoolInputError(f"SlabCollator: a slab has no side column {name!r}; pass the output's "
                                     f"own `SlabDataset.side_columns` (keep the column when loading with datasets)")
        parts, first = [], None
        for i, f in enumerate(features):
            # held to the declaration (`datasets` rows come back as Python lists: int64, float64,
            # cast to it); a column known by name only, to the batch's first item's row width
            v, why = side_values(f[name], np.asarray(f["input_ids"]).size, c if isinstance(c, SideColumn) else None)
            if why is None and first is not None and v.shape[1:] != first.shape[1:]:
                why = f"has {per_token(v.shape[1:])}, batch item 0 {per_token(first.shape[1:])}"
            if why:
                raise PacktoolInputError(f"SlabCollator: batch item {i}: side column {name!r} {why}; {FIX}")
            first = v if first is None else first
            fill = c.fill if isinstance(c, SideColumn) else (0.0 if v.dtype.kind == "f" else -1)
            if isinstance(c, SideColumn):  # the declaration says what a pad holds (the reader's check)
                try:
                    check_side_fill(name, v, *check_row(f["input_ids"], f["loss_mask"], f["seq_lens"],
                                                        f["cu_seqlens_padded"])[1:], fill)
                except PacktoolInputError as e:
                    raise PacktoolInputError(f"SlabCollator: batch item {i}: {e}") from None
            parts.append(slab_side_features(v, f["seq_lens"], f["cu_seqlens_padded"], fill, self.keep_pads))
        out[name] = torch.from_numpy(np.ascontiguousarray(np.concatenate([p[0] for p in parts])))[None]
        out[f"shift_{name}"] = torch.from_numpy(np.ascontiguousarray(np.concatenate([p[1] for p in parts])))[None]


def _mask_dtype(value):
    """None (float32) or a floating torch dtype: the mask is additive, the dtype's minimum
    where a query may not look (torch.finfo), which a bool or integer dtype has not."""
    import torch
    if value is None or (isinstance(value, torch.dtype) and value.is_floating_point):
        return value
    raise PacktoolConfigError(f"mask_dtype must be a floating torch dtype (torch.float32, torch.bfloat16, "
                              f"torch.float16) or None, got {short(value)}: the 4D mask is additive (0, or the "
                              f"dtype's minimum where a token may not look); pass the model's dtype")


def _side_columns(value) -> tuple[SideColumn | str, ...]:
    """SideColumns or names (a list, or one comma-separated str as every library names
    argument takes: params.names), each once."""
    if isinstance(value, str):
        value = names("side_columns", value, PacktoolConfigError)
    if not isinstance(value, (list, tuple)) or not all(isinstance(c, (SideColumn, str)) for c in value):
        raise PacktoolConfigError(f"side_columns must be the output's side columns (`SlabDataset.side_columns`) or "
                                  f"their names (a list of str, or one comma-separated str), got "
                                  f"{type(value).__name__} {short(value)}")
    names("side_columns", [c for c in value if isinstance(c, str)], PacktoolConfigError)  # none empty
    seen: set[str] = set()
    for c in value:
        name = c.name if isinstance(c, SideColumn) else c
        if name in seen:
            raise PacktoolConfigError(f"side_columns lists {name!r} twice; list each column once")
        seen.add(name)
    return tuple(value)


def _check_items(features) -> None:
    """A batch is slab items; a Trainer with remove_unused_columns=True (its default) strips
    the slab columns before the collator sees them: say so instead of a KeyError."""
    if not isinstance(features, Sequence) or isinstance(features, (str, bytes)) or not features:
        raise PacktoolInputError(f"SlabCollator takes a non-empty list of slab items (SlabDataset items or slab "
                                 f"rows), got {type(features).__name__} {short(features)}")
    for i, f in enumerate(features):
        held = sorted(f) if isinstance(f, Mapping) else None
        missing = [k for k in SLAB_KEYS if held is None or k not in f]
        if missing:
            what = f"holds {short(held)}" if held is not None else f"is a {type(f).__name__}, not a dict"
            raise PacktoolInputError(f"SlabCollator: batch item {i} has no {missing[0]!r} (it {what}); items must "
                                     f"hold {', '.join(SLAB_KEYS)}: under a Trainer pass "
                                     f"remove_unused_columns=False, which otherwise drops them")


def needs_4d_mask(model) -> bool:
    """True when `model`'s attention would attend across segments given positions alone:
    a non-varlen implementation on a transformers without packed-sequence detection."""
    impl = str(getattr(model.config, "_attn_implementation", "") or "")
    if "flash" in impl:
        return False
    try:
        from transformers.masking_utils import find_packed_sequence_indices  # noqa: F401
    except ImportError:
        return True
    return False
