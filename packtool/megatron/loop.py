"""The `packtool train` loop: slabs -> megatron-core GPTModel -> AdamW, with logging.

Loss normalization: a step's loss is sum(weight * CE) over every loss token of the step
(all micro-batches, all DP ranks, all CP chunks) divided by the step's global number of
loss tokens, all-reduced over DP before the first backward. Each micro-batch backpropagates
its own sum divided by that global count, and gradients are summed over DP x CP, so the
update is that of the token mean whatever the micro-batching, grad accumulation or DP size.

Checkpoints: `torch.save` of {model state_dict, optimizer (fp32 masters + AdamW state),
step, model shape, the tokenizer trained on, flags} per tensor-parallel rank
(`mp_rank_XX.pt`), written by the DP/CP rank 0 of each TP rank (checkpoint.py). Not
megatron's dist_checkpointing format.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

import numpy as np
import torch

from packtool.errors import PacktoolConfigError, arg, cli_flag, missing
from packtool.integers import INT64_MAX, int_value
from packtool.megatron.checkpoint import check_room, check_save, data_record, save_checkpoint, state_bytes
from packtool.megatron.resume import check_resumed_data, check_resumed_shape, load_checkpoint, restore, trained_vocab
from packtool.megatron.compat import check_training_layout
from packtool.megatron.dataset import PackedSlabDataset, Step, check_max_seq, check_token_ids
from packtool.megatron.memory import check_fits, torch_allocations
from packtool.megatron.finite import check_weights, diverged, step_is_finite
from packtool.megatron.flops import H200_BF16_DENSE, train_flops
from packtool.megatron.model import GPTShape, build_gpt, loss_sum, positive_real
from packtool.megatron.optim import MasterAdamW, check_lr, clip_grad_norm, lr_at
from packtool.megatron.parallel import all_reduce_sum, init_parallel, reduce_grads
from packtool.megatron.step_log import StepRecord, _Log, check_json_log, note_log_gap
from packtool.slabs.format import SlabManifest

DEVICES = ("cpu", "cuda")
LM_HEADS = ("fused", "torch")  # the command line's `auto` picks one of these before TrainConfig

@dataclass
class TrainConfig:
    data_dir: str
    shape: Optional[GPTShape] = None  # None: from --load's checkpoint (given with it: must be the checkpoint's)
    resume_shape: dict = field(default_factory=dict)  # shape values named with `load` (the CLI's typed flags): the checkpoint's
    tp: int = 1
    cp: int = 1
    sp: Optional[bool] = None
    steps: int = 100
    lr: float = 3e-4
    warmup: int = 0
    weight_decay: float = 0.1
    clip_grad: float = 1.0
    micro_batch_tokens: Optional[int] = None
    vocab_size: Optional[int] = None  # the data's vocabulary when the manifest records none (token-id input)
    grad_accum: int = 1
    seed: int = 0
    device: str = "cpu"
    lm_head: str = "torch"
    fp8: str = "none"  # tensorwise | blockwise: FP8 GEMMs in the transformer's linears
    log_every: int = 10
    json_log: Optional[str] = None
    load: Optional[str] = None
    save: Optional[str] = None
    save_every: int = 0
    overwrite: bool = False  # replace checkpoint files already in --save (not --load's own), start a foreign --json-log anew
    inputs: tuple[str, ...] = ()  # other files the run reads (the CLI's --config): never written
    peak_flops: float = H200_BF16_DENSE
    quiet: bool = False

    def __post_init__(self) -> None:
        # refused here, before any work: another device trained on the CPU without a word,
        # another head failed only at the first step, after the model was built
        from packtool.errors import PacktoolConfigError, bad_choice
        if self.device not in DEVICES:
            raise bad_choice(PacktoolConfigError, "device", self.device, DEVICES)
        if self.lm_head not in LM_HEADS:
            raise bad_choice(PacktoolConfigError, "lm_head", self.lm_head, LM_HEADS)
        from packtool.kernels._triton import interpreting  # the kernel's own rule for where it runs
        if self.lm_head == "fused" and self.device == "cpu" and not interpreting():  # failed after the build
            raise PacktoolConfigError(f"{arg('lm_head', 'fused')} needs {arg('device', 'cuda')} (the Triton "
                                      f"kernel); on CPU give {arg('lm_head', 'torch')}{' or auto' if cli_flag('lm_head') else ''}"
                                      f" (or set TRITON_INTERPRET=1 for the slow CPU interpreter)",
                                      flag=cli_flag("lm_head"))
        # the schedule's numbers: a negative count or an inf/NaN rate ran, or ran on NaN loss, without a word
        for name in ("steps", "warmup", "log_every", "save_every"):
            setattr(self, name, int_value(name, getattr(self, name), 0, INT64_MAX, error=PacktoolConfigError))
        if self.vocab_size is not None:
            self.vocab_size = int_value("vocab_size", self.vocab_size, 1, INT64_MAX, error=PacktoolConfigError)
        self.lr = check_lr(self.lr)  # above float32's reach: a "packtool bug" at step 1 (S38-5)
        for name in ("weight_decay", "clip_grad"):
            setattr(self, name, positive_real(name, getattr(self, name), zero=True))
        from packtool.params import path  # '' read as "not given" (`if cfg.save`): nothing saved, no word
        for name in ("json_log", "load", "save"):
            setattr(self, name, path(name, getattr(self, name), PacktoolConfigError, optional=True))
        if not self.steps and not self.save:  # built the model, then exited 0 having done nothing (S40-6)
            raise PacktoolConfigError(f"{arg('steps', 0)} without {arg('save')}: the run would train nothing and "
                                      f"save nothing; give {arg('steps')} above 0, or {arg('save')} DIR to write "
                                      f"the initial checkpoint", flag=cli_flag("steps"))

@dataclass
class TrainResult:
    records: list[StepRecord] = field(default_factory=list)
    params: int = 0
    final_step: int = 0

def note_inert(cfg: TrainConfig, start: int) -> None:
    """A note, before any work, for a schedule that makes the run train nothing or next to nothing
    (S36-17): ran to its end without a word. Not refused: a short warm-up run of a longer
    schedule's flags (the benchmarks') is a fair use."""
    from packtool.notes import note
    after = f" after the checkpoint's step {start}" if start else ""
    if cfg.steps and cfg.warmup > start + cfg.steps:
        end = lr_at(start + cfg.steps - 1, cfg.lr, cfg.warmup, start + cfg.steps)
        note(f"{arg('warmup', cfg.warmup)} is above the run's last step ({arg('steps', cfg.steps)}{after}): the "
             f"learning rate never reaches {arg('lr', cfg.lr)} (it ends at {end:.2e}, {100 * end / cfg.lr:.2g}% of "
             f"it); give {arg('warmup')} at most {start + cfg.steps}, or more {arg('steps')}")
    if cfg.steps and cfg.lr == 0:
        note(f"{arg('lr', 0)}: the weights stay as they are{' loaded' if start else ' initialized'} (the run "
             f"trains nothing); give {arg('lr')} above 0")


def note_unused_side(cfg: TrainConfig, side, is_main: bool) -> None:
    """A note, before any work, naming the output's side columns (pack --side-columns /
    --support-columns), which this loop's loss never reads (S37-9): rollouts packed for RL were
    trained as plain SFT, the negative-advantage ones too, without a word. Not refused: SFT on a
    rollout output whose side columns are kept for another trainer is a fair use."""
    if not side or not cfg.steps or not is_main:  # nothing trained; every rank reads the same manifest
        return
    from packtool.notes import note
    names = ", ".join(c.name + (" (support)" if c.kind == "support" else "") for c in side)
    note(f"{cfg.data_dir} holds side columns {names}: packtool train's loss is next-token cross-entropy over "
         f"loss_mask and uses none of them (every row is trained as SFT, whatever its values); for an RL loss "
         f"(PPO, GRPO) read them as mb.side_targets of PackedSlabDataset in your own loop: see docs/RL.md")


def train(cfg: TrainConfig, source: Optional[Callable[[PackedSlabDataset, int], Iterable[Step]]]
          = None) -> TrainResult:
    """Train per `cfg`. `source(dataset, start_step)` may replace the dataset's own steps
    (the benchmark feeds padded micro-batches of the same data through the same loop)."""
    with torch_allocations(cfg.device), ExitStack() as held:
        return _train(cfg, source, held)


def hold_written(cfg: TrainConfig, held: ExitStack) -> tuple[TrainConfig, bool]:
    """Check --save and --json-log, hold them for the run (output.lock, the lock `pack -o`
    takes) and check them again: two runs that both found the folder empty or the log new at
    start saved over each other's checkpoint and interleaved their logs, both exiting 0. Held by
    the run's rank 0 (`_run_rank`; its other ranks are the same run); the second check sees a run that
    finished between the first and the lock. Returns the config (--save resolved) and whether
    the log is appended to."""
    from packtool.output.files import resolve
    from packtool.output.lock import holding
    for again in (False, True):
        save = check_save(cfg.save, cfg.load, cfg.overwrite, cfg.tp) if cfg.save else None
        append_log = check_json_log(cfg, held=again) if cfg.json_log else False
        if again or _run_rank() != 0:
            break
        if save:
            held.enter_context(holding(save, cfg.save, "save", "train", "checkpoint folder"))
        if cfg.json_log:
            held.enter_context(holding(resolve(cfg.json_log), cfg.json_log, "json_log", "train", "log"))
    return dataclasses.replace(cfg, save=save), append_log


def _run_rank() -> int:
    """This process's rank in the run: the caller's process group's when it made one (a
    library user's own spawned ranks, which set no RANK: each took itself for rank 0, and the
    second was refused as another run on the same --save), else torchrun's RANK (init_parallel
    makes the group later)."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return 0 if os.environ.get("RANK", "0") == "0" else 1


def _sequence_parallel(cfg: TrainConfig) -> bool:
    """megatron-core's sequence parallelism reduce-scatters through CUDA: on by default under TP
    on a GPU; on the CPU off by default (said) and refused when asked for (S50B-5: exit 3 at the
    first forward, "Torch not compiled with CUDA enabled")."""
    from packtool.notes import job_note
    from packtool.params import torch_device
    gpu = torch_device("device", cfg.device).type == "cuda"
    if cfg.sp and not gpu:
        raise PacktoolConfigError(f"{arg('sp', True)} with {arg('device', cfg.device)}: megatron-core's sequence "
                                  f"parallelism needs CUDA; pass {arg('sp', False)}, or train on a GPU")
    if cfg.sp is None and cfg.tp > 1 and not gpu:
        job_note(f"{arg('device', cfg.device)}: sequence parallelism off (megatron-core's needs CUDA); "
                 f"{arg('tp', cfg.tp)} splits the model without it", _run_rank())
    return (cfg.tp > 1 and gpu) if cfg.sp is None else cfg.sp


def _train(cfg: TrainConfig, source, held: ExitStack) -> TrainResult:
    sp = _sequence_parallel(cfg)
    if cfg.fp8 != "none":  # a recipe this machine cannot run is refused before any re-pack advice
        from packtool.megatron.fp8 import check_recipe
        check_recipe(cfg.fp8, cfg.device)
    # slabs that do not fit this layout are refused before any process group or model exists
    check_training_layout(SlabManifest.read(cfg.data_dir, "data_dir").alignment, cfg.tp, cfg.cp, sp, cfg.fp8)
    cfg, append_log = hold_written(cfg, held)
    info = init_parallel(cfg.tp, cfg.cp, cfg.device)
    # the data is read before the model is built: a budget or checkpoint it refuses costs no model
    ds = PackedSlabDataset(cfg.data_dir, dp_rank=info.dp_rank, dp_size=info.dp,
                           cp_rank=info.cp_rank, cp_size=cfg.cp, seed=cfg.seed,
                           grad_accum=cfg.grad_accum, micro_batch_tokens=cfg.micro_batch_tokens,
                           device=info.device, cp_group=info.cp_group,
                           dp_group=info.dp_group if info.dp > 1 else None, argument="data_dir")
    data = data_record(ds.manifest, cfg.vocab_size)
    ckpt = load_checkpoint(cfg.load, info.tp_rank, cfg.tp) if cfg.load else None
    if ckpt:
        given = dataclasses.asdict(cfg.shape) if cfg.shape else cfg.resume_shape
        check_resumed_shape(cfg.load, ckpt["shape"], given)
        check_resumed_data(ckpt, data, cfg.data_dir, cfg.vocab_size, cfg.tp)
    shape = ckpt["shape"] if ckpt else cfg.shape
    if shape is None:
        raise missing(PacktoolConfigError, "load",
                      f"give the model shape (shape=GPTShape(...)) or {arg('load')} a checkpoint folder")
    if ds.manifest.vocab_size and ds.manifest.vocab_size > shape.vocab:
        raise PacktoolConfigError(f"{cfg.data_dir}: tokenizer vocab_size {ds.manifest.vocab_size} > model "
                         f"vocabulary {shape.vocab}")
    check_token_ids(ds, shape.vocab, cfg.vocab_size, f"the checkpoint {ckpt['path']}" if ckpt else "the model shape",
                    trained=trained_vocab(ckpt, data, cfg.data_dir) if ckpt else None)
    check_max_seq(ds, shape.max_seq, f"the checkpoint {ckpt['path']}" if ckpt else "the model shape")
    note_inert(cfg, ckpt["step"] if ckpt else 0)
    note_unused_side(cfg, ds.manifest.side_columns, info.is_main)
    check_fits(shape, cfg.tp, str(info.device))  # before the build: too large a model swapped for hours
    dtype = torch.bfloat16 if cfg.device == "cuda" else torch.float32
    model = build_gpt(shape, device=cfg.device, dtype=dtype, tp=cfg.tp, cp=cfg.cp, sp=sp,
                      seed=cfg.seed, fp8=cfg.fp8)
    opt = MasterAdamW(list(model.parameters()), lr=cfg.lr, weight_decay=cfg.weight_decay)
    start = 0
    if ckpt:
        start = restore(ckpt, model, opt)
        if append_log and info.is_main:
            note_log_gap(cfg, start)
    if cfg.save:  # a checkpoint that cannot fit is refused now, not after the training
        check_room(cfg.save, state_bytes(model, opt), info)
    params = list(model.parameters())
    log = _Log(cfg, info, append_log)
    log.header(f"GPTModel {shape.layers}x{shape.hidden} heads {shape.heads} ffn {shape.ffn} "
               f"vocab {shape.vocab}: {shape.params() / 1e6:.1f}M params · world {info.world} "
               f"(dp {info.dp} tp {info.tp} cp {info.cp} sp {sp}) · {cfg.device} · "
               f"lm-head {cfg.lm_head} · fp8 {cfg.fp8}")
    res = TrainResult(params=shape.params())
    total = start + cfg.steps
    model.train()
    sync = torch.cuda.synchronize if cfg.device == "cuda" else (lambda: None)
    sync()
    stream = (ds.steps(start_step=start, max_steps=cfg.steps) if source is None
              else itertools.islice(source(ds, start), cfg.steps))
    t_next = time.perf_counter()
    saved: Optional[int] = None  # the step of this run's last checkpoint, for a diverged run's line
    for st in stream:
        t0 = t_next  # the step's time includes reading and laying out its micro-batches
        lr = lr_at(st.step, cfg.lr, cfg.warmup, total)
        opt.set_lr(lr)
        n_loss = st.global_loss_tokens(device=info.device)
        acc = torch.zeros((), dtype=torch.float64, device=info.device)
        segs = []
        for mb in st.micro_batches:
            if mb is None:
                continue
            ls = loss_sum(model, mb, cfg.lm_head, tp_group=info.tp_group)
            if n_loss > 0:
                (ls / n_loss).backward()
            acc += ls.detach().double()
            segs.append(mb.seg_real)
        for p in params:  # a rank whose micro-batches were all empty still joins the reduce
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        reduce_grads(params, info)
        gnorm = clip_grad_norm(params, cfg.clip_grad, info.tp_group, info.tp_rank)
        loss_total, real = all_reduce_sum([float(acc), float(st.real_tokens)],
                                          info.dp_cp_group, info.device)
        loss = loss_total / max(n_loss, 1)
        ok = step_is_finite(loss, gnorm)  # the same on every rank (finite.py)
        if ok:  # a NaN/inf step is not applied: the weights stay those of the last finite step
            opt.step()
        opt.zero_grad()
        sync()
        dt = time.perf_counter() - t0
        real = real / info.cp  # each CP rank counted the full micro-batch's real tokens
        flops = all_reduce_sum([train_flops(shape, np.concatenate(segs)) if segs else 0.0],
                               info.dp_group if info.dp > 1 else None, info.device)[0]
        rec = StepRecord(step=st.step, loss=loss, loss_tokens=n_loss,
                         real_tokens=int(real), micro_batches=len(st.micro_batches),
                         empty_micro_batches=st.n_empty, grad_norm=gnorm, lr=lr, seconds=dt,
                         tokens_per_s=real / dt, mfu=flops / dt / (cfg.peak_flops * info.world))
        log.record(rec)
        if not ok:
            log.close()
            raise diverged(st.step, loss, gnorm, lr, cfg, saved, first=not res.records)
        res.records.append(rec)
        res.final_step = st.step + 1
        if st.step + 1 == total or (cfg.log_every and st.step % cfg.log_every == 0):  # 0: the last only
            log.row(rec)
        if cfg.save and cfg.save_every and res.final_step % cfg.save_every == 0:
            saved = _save(model, opt, res.final_step, shape, info, cfg, data, saved)
        t_next = time.perf_counter()
    if cfg.save:
        _save(model, opt, res.final_step, shape, info, cfg, data, saved)
    log.close()
    return res


def _save(model, opt, step: int, shape, info, cfg, data, saved: Optional[int]) -> int:
    """A checkpoint of finite weights only (finite.py); returns the step saved."""
    check_weights(list(model.parameters()), info, step, cfg, saved)
    save_checkpoint(cfg.save, model, opt, step, shape, info, cfg, data)
    return step
