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

This module is the package's face: `features` (one slab's features), `dataset` (`SlabDataset`;
`to_hf` through `load`), `collator` (`SlabCollator`, `needs_4d_mask`), `dp` (each rank's
slabs), `mask` (the bounded 4D mask) and `rows` (what a batch item is held to).
"""
from __future__ import annotations

from packtool.hf.collator import SlabCollator, needs_4d_mask
from packtool.hf.dataset import SlabDataset
from packtool.hf.dp import dp_order
from packtool.hf.features import IGNORE_INDEX, slab_features, slab_side_features

__all__ = ["SlabDataset", "SlabCollator", "slab_features", "slab_side_features", "dp_order",
           "needs_4d_mask", "IGNORE_INDEX"]
