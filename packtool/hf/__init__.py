"""Hugging Face trainers on packtool slabs: a torch Dataset of slabs and the collator that
turns them into transformers' padding-free batches (docs/HF.md).

A batch is what `transformers.DataCollatorWithFlattening` makes: `input_ids`, `labels` and
`position_ids` of shape [1, T], positions restarting at 0 on every segment, labels unshifted
(the model shifts them) and -100 on each segment's first token, on pads and on tokens the
source masks. That is exactly the slab's own `loss_mask` (FORMAT.md), so labels are
`where(loss_mask, input_ids, -100)`. Segments stay independent because:

- flash_attention_2 (and the other varlen kernels) read the segment starts from
  `position_ids`, or from `cu_seq_lens_q/k` when `flash_kwargs=True`;
- sdpa, eager and flex_attention build a block-diagonal causal mask from `position_ids`
  when no `attention_mask` is given and no KV cache is in use
  (`transformers.masking_utils.find_packed_sequence_indices`). Older transformers without it
  attend across segments: pass `mask_4d=True` there (a [1, 1, T, T] additive mask: memory
  grows with T squared, a batch whose mask cannot fit is refused: packtool.hf.mask).
  `needs_4d_mask(model)` says which.

So the collator never returns a 2D `attention_mask` (with one, transformers stops looking at
the positions and the segments would see each other), and every batch carries
`use_cache=False`: models default to `config.use_cache=True`, and a cache, even an empty one,
also switches the detection off. `Trainer` and `SFTTrainer` turn the cache off themselves;
a plain `model(**batch)` loop gets it from the batch.

The slabs' alignment pads (for Megatron's TP/CP/FP8) mean nothing to a padding-free HF model:
by default they are dropped (`keep_pads=False`); `keep_pads=True` keeps the slab's physical
layout, pads inside their segment with label -100.

DP: with an output packed with `--dp N` every rank gets the slabs the plan gave it, in
(step, micro-batch) order; without, slabs are dealt round robin. `SlabDataset(rank=r)` holds
rank r's slabs (own training loops); `SlabDataset(rank=None, world_size=N)` holds them all,
interleaved so that a sequential sampler under accelerate (what `Trainer` uses) hands rank r
its own slabs. Every rank holds the same number of slabs, as the Megatron dataset gives every
rank the same steps: a DDP rank that runs out first leaves the others waiting in the gradient
all-reduce. Where the slab count is not a multiple of world_size (round robin), a short rank
takes its first slab(s) again, as torch's DistributedSampler pads, with a warning (`--dp N`
packs a multiple of N slabs: each once); so does every rank whose slabs are not whole runs of
`per_device_batch` where world_size > 1 (accelerate's last batch took another rank's slabs,
S46B-7; one process's last batch is just short); a rank with no
slab at all is refused. Not the
Megatron dataset's empty micro-batch: an HF batch with no label has a NaN mean loss, and a
DDP rank must run the backward all the same.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from torch.utils.data import Dataset

from packtool.errors import PacktoolConfigError, PacktoolInputError
from packtool.hf.dp import dp_order, repeats_said
from packtool.hf.mask import block_causal_mask
from packtool.hf.rows import FIX, check_copies, check_row, check_side_fill, note_side_left_out
from packtool.layout import shift_like_labels
from packtool.integers import short
from packtool.params import checked, names, position, switch
from packtool.side import SideColumn, per_token, side_values
from packtool.slabs.format import SlabManifest
from packtool.slabs.reader import SlabIndex, SlabReader

__all__ = ["SlabDataset", "SlabCollator", "slab_features", "slab_side_features", "dp_order",
           "needs_4d_mask", "IGNORE_INDEX"]

IGNORE_INDEX = -100  # transformers' ignore_index of the causal-LM loss
SLAB_KEYS = ("input_ids", "loss_mask", "seq_lens", "cu_seqlens_padded")  # what a batch item must hold


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


class SlabDataset(Dataset):
    """A packed output's slabs as map-style torch dataset items, each a dict of the slab's columns that `SlabCollator`
    reads: `input_ids`, `loss_mask`, `seq_lens`, `cu_seqlens_padded` (numpy arrays).

    Reads go through `slabs.reader` (bounded memory: at most `row_group_cache` decoded row
    groups per process); a DataLoader worker opens its own files."""

    def __init__(self, path: str, rank: int | None = None, world_size: int = 1,
                 per_device_batch: int = 1, row_group_cache: int = 2):
        rank, world_size, per_device_batch, row_group_cache = (
            checked(k, v, PacktoolConfigError) for k, v in (("rank", rank), ("world_size", world_size),
                                                            ("per_device_batch", per_device_batch),
                                                            ("row_group_cache", row_group_cache)))
        self.path = path
        self.manifest = SlabManifest.read(path)
        self.index = SlabIndex.build(self.manifest)
        self.order = dp_order(self.index, self.manifest.dp, world_size, rank, per_device_batch)
        self.rank, self.world_size, self.per_device_batch = rank, world_size, per_device_batch
        self._say_repeats()
        # the output's side columns: pass them on, `SlabCollator(side_columns=ds.side_columns)`
        self.side_columns: tuple[SideColumn, ...] = self.manifest.side_columns
        self._cache = row_group_cache
        self._reader: SlabReader | None = None
        self._pid = -1

    def _say_repeats(self) -> None:
        """By rank 0 (rank None: every rank's, here), whose log is read: the same line on every rank
        was N lines for N ranks."""
        said = repeats_said(self.path, self.index, self.manifest.dp, self.world_size, self.per_device_batch)
        if said:
            from packtool.notes import job_note  # on stderr and kept (notes.NOTES, --json), as every note
            job_note(said, self.rank)

    def __len__(self) -> int:
        return int(self.order.size)

    @property
    def loss_tokens(self) -> int:
        return int(self.index.num_loss_tokens[self.order].sum())

    def _read(self) -> SlabReader:
        if self._reader is None or self._pid != os.getpid():  # file handles are per process
            self._reader = SlabReader(self.manifest, self.index, cache=self._cache)
            self._pid = os.getpid()
        return self._reader

    def to_hf(self, streaming: bool = False, **load_kwargs):
        """The same items, in the same order, as a `datasets` dataset (TRL's SFTTrainer takes
        nothing else). streaming=False: a `datasets.Dataset` of the shards (every row group
        checked first as this dataset's rows are, then converted once into the `datasets`
        cache, `load_kwargs` go to `load_dataset`) in this order;
        True: a `datasets.IterableDataset` reading through this dataset, no copy (the
        trainer needs `max_steps`)."""
        streaming = switch("streaming", streaming, PacktoolConfigError)  # before the optional import
        if streaming and load_kwargs:  # they would go nowhere: read through this dataset
            raise PacktoolConfigError(f"to_hf(streaming=True) reads through this dataset, no load_dataset: "
                                      f"load_kwargs {', '.join(load_kwargs)} would be ignored; drop them or pass "
                                      f"streaming=False", path=self.path, flag="load_kwargs")
        from packtool.hf.load import check_load_kwargs, loaded_as_checked
        check_load_kwargs(load_kwargs)  # before the shards are hashed
        try:
            import datasets
        except ImportError as e:  # an optional dependency: the rest of packtool.hf works without it
            raise PacktoolConfigError(f"to_hf needs the `datasets` package ({e}); pip install 'packtool[hf]'") from None
        if streaming:
            return datasets.IterableDataset.from_generator(_items, gen_kwargs={"ds": self})
        from packtool.slabs.check import check_checksum
        # `datasets` reads every byte and hands its rows out unchecked: every check a row of
        # __getitem__ passes first (each shard's checksum, every row group), one group at a time
        checked = {shard for (shard, _), _ in SlabReader(self.manifest, self.index, cache=1).groups()}
        with self.manifest.reading():
            for i in sorted(set(range(len(self.manifest.shards))) - checked):  # a shard of no rows: hashed all the same
                check_checksum(self.manifest, i)
        files = [self.manifest.shard_path(i) for i in range(len(self.manifest.shards))]
        return loaded_as_checked(self.manifest, files, load_kwargs,
                                 lambda full: full.select_columns(list(self._columns())).select(self.order))

    def __getitem__(self, i: int | slice) -> dict:
        """Slab `i` (an integer, negative from the end; params.position) as a dict of arrays;
        a slice, as `datasets.Dataset` answers one (`to_hf()[1:3]`): a dict of lists, one
        value per slab."""
        if isinstance(i, slice):
            try:
                span = range(*i.indices(len(self)))
            except (TypeError, ValueError) as e:  # ds[1.5:], ds[::0]
                raise PacktoolInputError(f"SlabDataset[{i.start}:{i.stop}:{i.step}]: {e}; a slice takes "
                                         f"integers and a nonzero step", path=self.path) from None
            items = [self._item(j) for j in span]
            return {k: [it[k] for it in items] for k in (items[0] if items else self._columns())}
        return self._item(position("i", i, len(self), "slab", path=self.path))

    def _columns(self) -> tuple[str, ...]:
        return ("input_ids", "loss_mask", "seq_lens", "cu_seqlens_padded", *(c.name for c in self.side_columns))

    def _item(self, i: int) -> dict[str, np.ndarray]:
        row = self._read().row(int(self.order[i]))
        # copies: the reader's arrays are views of a row group it may evict before collation
        return {"input_ids": row.input_ids.copy(), "loss_mask": row.loss_mask.copy(),
                "seq_lens": row.seq_lens.copy(),
                "cu_seqlens_padded": np.concatenate(([0], np.cumsum(row.seg_padded))),
                **{k: v.copy() for k, v in row.side.items()}}


def _items(ds: SlabDataset):
    for i in range(len(ds)):
        yield ds[i]


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
        import torch
        _check_items(features)
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
