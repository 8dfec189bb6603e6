"""`PackedSlabDataset`: packtool slabs -> THD micro-batches for megatron-core, per step.

Use from your own megatron-core training script (one process per GPU, after
`parallel_state.initialize_model_parallel(...)`)::

    from megatron.core import parallel_state as ps
    from packtool.megatron import PackedSlabDataset, build_gpt, token_losses

    ds = PackedSlabDataset("packed/", dp_rank=ps.get_data_parallel_rank(),
                           dp_size=ps.get_data_parallel_world_size(),
                           dp_group=ps.get_data_parallel_group(),
                           cp_rank=ps.get_context_parallel_rank(),
                           cp_size=ps.get_context_parallel_world_size(),
                           cp_group=ps.get_context_parallel_group(),
                           seed=0, grad_accum=8, micro_batch_tokens=16384, device="cuda")
    for step in ds.steps(start_step=0):
        n_loss = step.global_loss_tokens()            # all-reduced over DP
        for mb in step.micro_batches:                  # ThdBatch, or None when empty
            if mb is None:
                continue
            per_token = token_losses(model, mb)        # [1, t_local], float32
            ((per_token * mb.loss_weight).sum() / n_loss).backward()
        # all-reduce grads over DP x CP (sum), optimizer.step(), zero_grad()

Side columns the slabs hold (`pack --side-columns`) come with every micro-batch:
`mb.side[name]` as stored (token-aligned) and `mb.side_targets[name]` shifted like
`labels` (target-aligned), cut to the rank's CP positions (docs/RL.md).

The model's `core_attention` must be `packtool.megatron.PackedCoreAttention` (or TE's
THD attention): `build_gpt` does that. Memory is bounded by the per-slab scalars plus a
couple of decoded row groups (`row_group_cache`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from packtool.errors import PacktoolConfigError, PacktoolInputError, arg
from packtool.free_memory import failed_allocation, out_of_memory
from packtool.hf.dp import ranks_shown
from packtool.align import Alignment
from packtool.integers import INT64_MAX
from packtool.megatron.batching import StepPlan, check_budget, merge_slabs, plan_epoch
from packtool.megatron.thd import ThdBatch, make_thd_batch
from packtool.params import checked, position, process_coords, torch_device
from packtool.slabs.format import SlabManifest
from packtool.slabs.reader import SlabIndex, SlabReader


@dataclass
class Step:
    step: int
    epoch: int
    micro_batches: list[ThdBatch | None]  # None = an empty micro-batch (zero loss)
    n_empty: int
    loss_tokens: int  # this DP rank's loss tokens in the step (full micro-batches, all CP)
    real_tokens: int
    dp_group: Any = None
    dp_size: int = 1

    def global_loss_tokens(self, device: Any = None) -> int:
        """Loss tokens of the step summed over DP ranks (an all-reduce when DP > 1)."""
        device = torch_device("device", device, optional=True)
        if self.dp_group is None:
            if self.dp_size > 1:  # this rank's own count as every rank's denominator: a mis-weighted loss
                raise PacktoolConfigError(
                    f"global_loss_tokens: the dataset runs {arg('dp_size', self.dp_size)} but has no dp_group to "
                    f"sum the step's loss tokens over ({self.loss_tokens} are this rank's alone): pass dp_group "
                    f"to PackedSlabDataset (e.g. ps.get_data_parallel_group()), or sum step.loss_tokens over "
                    f"the DP ranks yourself")
            return self.loss_tokens
        import torch
        import torch.distributed as dist
        t = torch.tensor([self.loss_tokens], dtype=torch.int64, device=device)
        dist.all_reduce(t, group=self.dp_group)
        return int(t.item())


def check_token_ids(ds: "PackedSlabDataset", model_vocab: int, vocab_size: int | None, whose: str,
                    trained: int | None = None) -> None:
    """An output packed from token ids (no tokenizer, so no vocabulary its ids were checked
    against at pack) must hold ids below `vocab_size` when given, else below `trained` (the
    vocabulary a resumed checkpoint recorded: its padding rows up to `model_vocab` are no
    tokens), else below the model's vocabulary `model_vocab` (`whose`: where it came from): the
    embedding would index past its table, an IndexError mid-step. The dataset's reader holds
    the bound as it decodes each row group (`SlabReader.bound_ids`: its id check, one reduction,
    no read of its own), before any of its rows reaches a batch. The manifest records each shard's
    largest id (`max_token_id`, held by every reader): one at or over the bound is refused here, at
    start, before the model is built; an output of older packtool records none, and a bad id
    there stops the run mid-way, in one line naming shard, row and id."""
    if ds.manifest.vocab_size:  # ids held to it by every reader; train() holds it to the model's
        return
    if vocab_size is not None and vocab_size <= model_vocab:
        top, said = vocab_size, (f"{arg('vocab_size', vocab_size)} (the vocabulary of an output packed without a "
                                 f"tokenizer): give a larger {arg('vocab_size')}, above every id")
    elif trained is not None and trained <= model_vocab:
        top, said = trained, (f"the vocabulary {trained} that {whose} was trained on: train on an output of that "
                              f"vocabulary, or start a new run without {arg('load')}")
    else:
        top, said = model_vocab, (f"the vocabulary {model_vocab} of {whose}: train on an output of that "
                                  f"vocabulary, or start a new run")
    most = ds.manifest.max_token_id
    if most is None:  # said once, here: the one start that holds an output's ids to a vocabulary
        from packtool.notes import note
        note(f"{ds.manifest.manifest} records no max_token_id (written by an older packtool): its token ids are "
             f"held below {top} as each row group is read, mid-run, not at start; re-pack to have them checked "
             f"before training")
    elif most >= top:
        # the record, not a read of every id: one edited up passes every reader, verify fails it
        raise PacktoolConfigError(f"{ds.manifest.manifest}: token id {most} (its largest as the manifest records "
                                  f"it, max_token_id) is not below {said} (`packtool verify` fails a record "
                                  f"above the shards' ids: run it first if no id that large was packed)")
    ds.reader.bound_ids(top, said)


def check_max_seq(ds: "PackedSlabDataset", max_seq: int, whose: str) -> None:
    """The model's declared `max_seq` (`whose`: where it came from) is at least the output's longest
    padded segment, the positions a THD batch asks of it (its max_seqlen): RoPE itself takes any
    length, so a shape below its data trained without a word. Reads only the row groups of slabs
    longer than max_seq, before the model is built."""
    from packtool.slabs.reader import longest_segment
    found = longest_segment(ds.manifest, ds.index, max_seq)
    if found is not None:
        raise PacktoolConfigError(f"{arg('max_seq', max_seq)} of {whose} is below the output's longest segment, "
                                  f"{found[0]} tokens ({found[1]}, rows count from 0): give {arg('max_seq')} "
                                  f"at least {found[0]}")


class PackedSlabDataset:
    """Streams a packtool slab directory as optimizer steps of THD micro-batches.

    dp_rank/dp_size/dp_group: this rank's data-parallel coordinates (default: dp_group's rank and
      size, else those of the DP megatron's parallel_state runs, else 0 of 1); a group left out is
      parallel_state's when the rank and size given agree with it (params.process_coords). dp_group
      sums Step.global_loss_tokens(): with dp_size > 1 and none, that call is refused. When the
      manifest holds a DP plan (`--dp N` at pack time), dp_size must equal N and the slabs'
      dp_rank/step are followed; otherwise slabs are dealt round-robin, `grad_accum` per rank per step.
    cp_rank/cp_size/cp_group: context-parallel coordinates, taken as the DP ones are; cp_size
      else 1 (whole slabs, whatever CP they were packed for). Each rank gets chunks r and 2cp-1-r of
      every segment (packtool.layout),
      so slabs packed for another CP train as they are when their segments divide into
      2*cp_size chunks (packed cp=4 trains at cp=2 or 1); otherwise one line names the re-pack.
    seed: reshuffles every epoch (steps when planned; row groups and rows otherwise).
    micro_batch_tokens: merge slabs of a step into micro-batches of at most this many
      tokens (tail pad charged once per micro-batch); None = one slab per micro-batch. A
      budget below the largest slab is refused (it could not be kept).
    argument: what the caller calls `path` (train: `data_dir`), named by a store output's
      one line when the store stops answering after the manifest was read.
    """

    def __init__(self, path: str, dp_rank: int = 0, dp_size: int | None = None, cp_rank: int = 0,
                 cp_size: int | None = None, seed: int = 0, grad_accum: int = 1,
                 micro_batch_tokens: int | None = None, device: Any = "cpu",
                 cp_group: Any = None, dp_group: Any = None, row_group_cache: int = 2, argument: str = "path"):
        (dp_rank, dp_size, cp_rank, cp_size, seed, grad_accum, micro_batch_tokens, row_group_cache) = (
            checked(k, v, PacktoolConfigError) for k, v in (
                ("dp_rank", dp_rank), ("dp_size", dp_size), ("cp_rank", cp_rank), ("cp_size", cp_size),
                ("seed", seed), ("grad_accum", grad_accum), ("micro_batch_tokens", micro_batch_tokens),
                ("row_group_cache", row_group_cache)))
        device = torch_device("device", device)  # at the call, not at the first micro-batch made
        # a group not given: the DP / CP this process runs (megatron's parallel_state), when it agrees
        cp_rank, cp_size, cp_group = process_coords("cp", cp_rank, cp_size, cp_group, f"{path}: ")
        dp_rank, dp_size, dp_group = process_coords("dp", dp_rank, dp_size, dp_group, f"{path}: ")
        dp_size = 1 if dp_size is None else dp_size
        self.manifest = SlabManifest.read(path, argument)  # argument: a caller's name for `path` (train: data_dir)
        self.align = self.manifest.alignment
        self.index = SlabIndex.build(self.manifest)
        self.reader = SlabReader(self.manifest, self.index, cache=row_group_cache)
        self.planned = self.manifest.dp > 1
        if self.planned and dp_size != self.manifest.dp:
            raise PacktoolConfigError(f"{path} was packed with {arg('dp', self.manifest.dp)} but training runs "
                             f"data-parallel size {dp_size}: re-pack with {arg('dp', dp_size)}, or "
                             f"pack without {arg('dp')} for round-robin dealing")
        if not 0 <= dp_rank < dp_size:
            raise PacktoolConfigError(f"dp_rank={dp_rank} is out of range for dp_size={dp_size}: pass a rank in "
                                      f"0..{dp_size - 1}")
        if grad_accum < 1:
            raise PacktoolConfigError(f"{arg('grad_accum')} must be >= 1, got {grad_accum}")
        self.cp_size = _training_cp(path, cp_size, cp_rank)
        need_s = Alignment(cp=self.cp_size).s  # the CP zigzag's per-sequence multiple
        if self.align.s % need_s:
            raise PacktoolConfigError(f"{path} was packed for cp={self.align.cp} (segments padded to "
                             f"multiples of {self.align.s}), training cp={self.cp_size} needs "
                             f"multiples of {need_s}: re-pack with {arg('cp', self.cp_size)}")
        # otherwise every segment splits into 2*cp_size equal chunks: `load` re-derives the
        # zigzag for the training CP (packtool.layout), whatever CP the slabs were packed for
        self.dp_rank, self.dp_size, self.cp_rank = dp_rank, dp_size, cp_rank
        self.seed, self.grad_accum, self.budget = seed, grad_accum, micro_batch_tokens
        self.device, self.cp_group, self.dp_group = device, cp_group, dp_group
        check_budget(self.index, self.align, micro_batch_tokens)
        if not self.planned:
            _say_dealing(path, len(self.index), dp_size, grad_accum, _job_rank(dp_rank, cp_rank, self.cp_size))

    def plan(self, epoch: int, first_step: int = 0) -> list[StepPlan]:
        epoch, first_step = checked("epoch", epoch), checked("first_step", first_step)  # True is no epoch
        return plan_epoch(self.index, self.align, self.dp_size, self.dp_rank, epoch, self.seed,
                          self.grad_accum, self.budget, self.planned, first_step)

    def steps_per_epoch(self) -> int:
        return len(self.plan(0))

    def load(self, mb: list[int]) -> ThdBatch | None:
        if isinstance(mb, (str, bytes, dict)) or not hasattr(mb, "__iter__"):  # load(3): 'int' is not iterable
            raise PacktoolInputError(f"mb must be a list of slab indices (a plan's micro-batch), got "
                                     f"{type(mb).__name__} {mb!r:.40}", path=self.manifest.path)
        mb = list(mb)
        if not mb:
            return None
        # slab numbers of the output (a plan's micro-batch): each an integer in range, negative from the end
        rows = [self.reader.row(position("mb", i, len(self.index), "slab", path=self.manifest.path)) for i in mb]
        fills = {c.name: c.fill for c in self.reader.side_columns}
        try:
            m = merge_slabs(rows, self.align, self.manifest.pad_id, restrip=self.budget is not None,
                            side_fill=fills)
            return make_thd_batch(m.input_ids, m.loss_mask, m.seg_len, m.seg_padded,
                                  cp=self.cp_size, cp_rank=self.cp_rank, device=self.device,
                                  cp_group=self.cp_group, side=m.side, side_fill=fills)
        except (MemoryError, RuntimeError) as e:  # numpy's MemoryError, torch's CPU allocator's RuntimeError
            if failed_allocation(e) is None:
                raise
            said = ", ".join(str(i) for i in mb[:4]) + (f" and {len(mb) - 4} more" if len(mb) > 4 else "")
            more = ("raise the limit), or fewer tokens per micro-batch (micro_batch_tokens)" if len(rows) > 1
                    else "raise the limit, or run on a machine with more memory)")
            raise out_of_memory(e, self.manifest.path, f"building the micro-batch of slabs {said} "
                                f"({sum(r.input_ids.size for r in rows):,} tokens)", "the output", more) from None

    def steps(self, start_step: int = 0, max_steps: int | None = None) -> Iterator[Step]:
        """Steps forever (epoch after epoch) from global step `start_step` (resume)."""
        start_step, max_steps = checked("start_step", start_step), checked("max_steps", max_steps)
        if max_steps and start_step + max_steps - 1 > INT64_MAX:  # a checkpoint records a step as int64
            raise PacktoolConfigError(f"{arg('start_step', start_step)} with {arg('max_steps', max_steps)} runs "
                                      f"past step 2^63-1: give at most {arg('max_steps', INT64_MAX - start_step + 1)}")
        # every epoch has the same number of steps (rank_steps: the packer's steps, or the slabs
        # dealt grad_accum at a time), and each epoch's shuffle is seeded by its number alone:
        # a resume at any step plans one epoch, not every epoch before it
        per = self.steps_per_epoch() if start_step else 1
        epoch, done = start_step // per, 0
        step = epoch * per
        while (max_steps is None or done < max_steps) and step <= INT64_MAX:  # no step number past int64
            plans = self.plan(epoch, first_step=step)
            if not plans:
                return
            for p in plans:
                if p.step > INT64_MAX:  # an endless stream ends where step numbers do
                    return
                if p.step < start_step:
                    continue
                mbs = [self.load(mb) for mb in p.micro_batches]
                real = [m for m in mbs if m is not None]
                yield Step(step=p.step, epoch=epoch, micro_batches=mbs, n_empty=p.n_empty,
                           loss_tokens=sum(m.num_loss_tokens for m in real),
                           real_tokens=sum(m.num_tokens for m in real), dp_group=self.dp_group,
                           dp_size=self.dp_size)
                done += 1
                if max_steps is not None and done >= max_steps:
                    return
            step += len(plans)
            epoch += 1


def _say_dealing(path: str, n: int, dp_size: int, grad_accum: int, rank: int) -> None:
    """Round-robin dealing of `n` slabs to `dp_size` ranks, `grad_accum` per step: what it cannot
    give as asked is refused on every rank, or said by the job's rank 0 (`rank`: this process's), as
    packtool.hf says its own (hf.dp): a rank with no slab would only wait in the all-reduce, every
    step; a step never spans two epochs, so it takes at most a rank's slabs."""
    from packtool.notes import job_note as note  # on stderr and kept (notes.NOTES, --json), by rank 0
    if dp_size > n:
        raise PacktoolConfigError(f"{arg('dp_size', dp_size)} but {path} holds {n} slabs: {dp_size - n} rank(s) would "
                                  f"get none (an empty micro-batch every step); run at most {n} data-parallel "
                                  f"ranks, or re-pack into more slabs (`packtool pack --dp {dp_size}`, or a "
                                  f"smaller `--max-tokens`)")
    per_rank = -(-n // dp_size)
    if n % dp_size:
        short = np.arange(n % dp_size, dp_size)
        note(f"{path}: {n} slabs do not divide among {arg('dp_size', dp_size)} ranks: rank(s) {ranks_shown(short)} "
             f"take {per_rank - 1} per epoch where the others take {per_rank}, so their last step of every epoch "
             f"has a slab fewer (an empty micro-batch where it had one); pack with `packtool pack --dp {dp_size}` "
             f"to give every rank the same", rank)
    if grad_accum > per_rank:
        note(f"{arg('grad_accum', grad_accum)} is above the {per_rank} slab(s) of {path} per data-parallel rank "
             f"({n} over {dp_size}): each step takes {per_rank} (one epoch), not {grad_accum}; give "
             f"{arg('grad_accum')} at most {per_rank}, or pack into more slabs", rank)


def _job_rank(dp_rank: int, cp_rank: int, cp_size: int) -> int:
    """This process's rank in the job, 0 for one process only: the one its coordinates give, and
    where a torch.distributed group is up, its rank there too (the tensor-parallel ranks of a DP
    rank share its coordinates; a process that builds every rank's dataset has one group rank)."""
    import torch.distributed as dist
    own = dp_rank * cp_size + cp_rank
    return (dist.get_rank() or own) if dist.is_available() and dist.is_initialized() else own


def _training_cp(path: str, cp_size: int | None, cp_rank: int) -> int:
    """The CP size training runs: cp_size (a group's size once params.process_coords has asked it),
    else 1, never the packed cp (S48B-4: a process with no CP group was handed CP rank 0's half of
    every segment, without a word); cp_rank within it."""
    cp_size = 1 if cp_size is None else cp_size
    if not 0 <= cp_rank < cp_size:
        raise PacktoolConfigError(f"{path}: cp_rank {cp_rank} out of range for cp_size {cp_size}: pass "
                         f"cp_size (the training CP, e.g. ps.get_context_parallel_world_size())")
    return cp_size
