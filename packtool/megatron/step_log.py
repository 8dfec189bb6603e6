"""`packtool train`'s --json-log: the step record a run appends, the checks a log path passes
before any work (whose file it is, who writes it now, where it may live) and the note a resumed
run's log gets when it does not follow on. The loop (loop.py) writes through `_Log`; `cfg` is
its TrainConfig (json_log, load, save, overwrite, inputs, quiet), not imported: loop imports this."""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from packtool.errors import PacktoolOutputError, arg, cli_flag
from packtool.megatron.checkpoint import CKPT
from packtool.megatron.finite import json_line

if TYPE_CHECKING:
    from packtool.megatron.parallel import ParallelInfo


@dataclass
class StepRecord:
    step: int
    loss: float
    loss_tokens: int
    real_tokens: int
    micro_batches: int
    empty_micro_batches: int
    grad_norm: float
    lr: float
    seconds: float
    tokens_per_s: float
    mfu: float


_STEP_KEYS = frozenset(f.name for f in dataclasses.fields(StepRecord))

def _is_step_log(path: str) -> bool:
    """A --json-log an earlier run wrote: its first and last lines are step records (read
    at both ends only: a long run's log is large)."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
            f.seek(max(0, f.seek(0, os.SEEK_END) - (1 << 16)))
            tail = f.read(1 << 16)  # bounded though the log grows meanwhile
    except OSError:
        return False
    lines = [head.split(b"\n", 1)[0], tail.rstrip(b"\n").rsplit(b"\n", 1)[-1]]
    try:
        return all(set(json.loads(ln)) == _STEP_KEYS for ln in lines)
    except (ValueError, TypeError, RecursionError):
        return False

def _last_step(path: str) -> int:
    """The step a step log ends at (its last line: _is_step_log read it)."""
    with open(path, "rb") as f:
        f.seek(max(0, f.seek(0, os.SEEK_END) - (1 << 16)))
        return int(json.loads(f.read(1 << 16).rstrip(b"\n").rsplit(b"\n", 1)[-1])["step"])


def _log_steps(path: str) -> str:
    return f"it ends at step {_last_step(path)}"


def note_log_gap(cfg, start: int) -> None:
    """A resumed run continues its log; one that resumes elsewhere than the log's next step (an
    earlier checkpoint, another run's) is said: its steps appear twice, or some are missing."""
    from packtool.notes import note
    try:
        last = _last_step(cfg.json_log) if os.path.getsize(cfg.json_log) else start - 1
    except (OSError, ValueError, KeyError, TypeError):  # checked as a step log at start: changed since
        return
    if last != start - 1:
        what = (f"steps {start}..{last} appear twice" if last >= start else f"steps {last + 1}..{start - 1} are missing")
        note(f"{cfg.json_log} ends at step {last} but this run resumes at step {start} ({arg('load')} {cfg.load}): "
             f"its lines are appended, so {what}; give another {arg('json_log')} to keep the runs apart")


def refuse_inside_checkpoints(cfg) -> None:
    """--json-log never inside the --save or --load folder: check_save lets only checkpoint files
    live there, so a log the run wrote (or one a checkpoint overwrote) stopped the resume."""
    from packtool.output.relations import is_inside, real_path
    for name in ("save", "load"):
        folder = getattr(cfg, name)
        if folder and is_inside(real_path(cfg.json_log), real_path(folder)):
            raise PacktoolOutputError(f"is inside the {arg(name)} folder {folder}, which holds checkpoint files "
                                      f"only; write {arg('json_log')} beside that folder", path=cfg.json_log,
                                      flag=cli_flag("json_log"))


def check_json_log(cfg, held: bool = False) -> bool:
    """--json-log, before any work: a file packtool may write (packtool.output's rules), never
    the run's inputs nor inside a packed output; an existing log of packtool train is appended
    to by a resumed run (--load) only, any other existing file (or another run's log, for a run
    that resumes nothing) only replaced with --overwrite. Returns
    whether the log is appended to (`held`: this run holds the log's lock already)."""
    from packtool.output.files import check_log_file
    from packtool.output.paths import refuse_inside_packed
    ckpts = [os.path.join(cfg.load, n) for n in os.listdir(cfg.load) if CKPT.match(n)] \
        if cfg.load and os.path.isdir(cfg.load) else []
    append = check_log_file(cfg.json_log, "json_log", replace=cfg.overwrite,
                            inputs=[*cfg.inputs, *ckpts], ours=_is_step_log)
    if append and not cfg.load and os.path.getsize(cfg.json_log):  # a new run never continues another's log
        if not cfg.overwrite:
            if not held:  # a run writing it now is said as that (the lock's line), not as a finished run's log
                _probe_lock(cfg.json_log)
            raise PacktoolOutputError(f"is the log of another packtool train run ({_log_steps(cfg.json_log)}); only "
                                      f"a run resumed with {arg('load')} continues it: pass {arg('overwrite', True)} "
                                      f"to start it anew, or give another {arg('json_log')}", path=cfg.json_log,
                                      flag=cli_flag("json_log"))
        append = False
    refuse_inside_packed(cfg.json_log, "json_log")  # after: a checkpoint given as the log is "the input"
    refuse_inside_checkpoints(cfg)  # after: a checkpoint file given as the log is "the input"
    return append


def _probe_lock(log: str) -> None:
    from packtool.output.files import resolve
    from packtool.output.lock import holding
    with holding(resolve(log), log, "json_log", "train", "log"):
        pass


class _Log:
    def __init__(self, cfg, info: ParallelInfo, append: bool):
        self.on = info.is_main and not cfg.quiet
        from packtool.output.files import open_append
        self.json = open_append(cfg.json_log, "json_log", truncate=not append) \
            if (cfg.json_log and info.is_main) else None
        self.path = cfg.json_log
        if self.on:
            from rich.console import Console
            self.console = Console()

    def header(self, text: str) -> None:
        if self.on:
            self.console.print(text)

    def row(self, r: StepRecord) -> None:
        if self.on:
            self.console.print(
                f"[bold]step {r.step:>6}[/] loss [cyan]{r.loss:8.4f}[/]  "
                f"{r.tokens_per_s:>10,.0f} real tok/s  MFU [green]{100 * r.mfu:5.1f}%[/]  "
                f"mb {r.micro_batches} ({r.empty_micro_batches} empty)  "
                f"gnorm {r.grad_norm:.3f}  lr {r.lr:.2e}")

    def record(self, r: StepRecord) -> None:
        if self.json:  # written whole or not at all: a line cut by a full disk made the log not
            fd = self.json.fileno()  # packtool's (`_is_step_log`), and the resume refused it
            at = os.lseek(fd, 0, os.SEEK_END)
            line = memoryview(json_line(dataclasses.asdict(r)).encode())  # strict JSON: NaN as null
            try:
                while line:
                    line = line[os.write(fd, line):]
            except OSError as e:  # named as --json-log's file (a write names none), with the fix
                from packtool.output.files import cannot_write
                os.ftruncate(fd, at)
                raise cannot_write(e, self.path, "json_log") from None

    def close(self) -> None:
        if self.json:
            self.json.close()
