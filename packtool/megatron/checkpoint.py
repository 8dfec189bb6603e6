"""`packtool train`'s checkpoints: where --save may write and what it writes (resume.py reads one back).

A checkpoint is a `torch.save` file per tensor-parallel rank (`mp_rank_XX.pt`) holding
{model state_dict, optimizer (fp32 masters + AdamW state), step, model shape, tp, data, flags}
("data": the tokenizer the run trained on, as the output's manifest gives it, so that a resume
on an output of another tokenizer is refused):
tensors, numbers, strings, None and containers of them only. It is read back with torch's
weights-only unpickler and nothing else: a checkpoint folder is often copied or shared, and
a full unpickle of one runs whatever code its author put in it.
"""
from __future__ import annotations

import dataclasses
import os
import stat
from typing import Optional

import torch

from packtool.checkpoint_kind import CKPT, KEYS, is_checkpoint  # noqa: F401  (the content rule's owner)
from packtool.errors import PacktoolOutputError, arg, cli_flag
from packtool.megatron.model import GPTShape



def ckpt_path(d: str, tp_rank: int) -> str:
    return os.path.join(d, f"mp_rank_{tp_rank:02d}.pt")


def check_save(d: str, load: Optional[str], overwrite: bool, tp: int = 1) -> str:
    """--save, before any work (packtool.output's rules): a folder (made if missing), not a link
    to nothing, holding nothing but packtool checkpoints (`is_checkpoint`: a file of that name
    is not one by its name alone). They are replaced only with --overwrite or when it is the
    --load folder (a resumed run), never through a link, and only as a whole: a rank file the
    run of `tp` TP ranks does not write would stay beside the new ones. Returns the resolved folder."""
    from packtool.output.files import check_new_file, refuse_foreign_files, refuse_uri, refused, resolve_folder
    from packtool.output.paths import refuse_inside_packed
    refuse_uri(d, "save")
    p = resolve_folder(d, "save")
    # the names below are said as typed (`d`), and resolve to those in `p` (paths.refused)
    refuse_inside_packed(os.path.join(d, "mp_rank_00.pt"), "save", mine="checkpoint")  # its own folder only
    if os.path.lexists(p) and not os.path.isdir(p):
        raise refused(f"exists and is not a folder; give a checkpoint folder as {arg('save')}", d, p,
                      cli_flag("save"))
    if not os.path.isdir(p):
        return p
    resuming = bool(load) and os.path.isdir(load) and os.path.samefile(load, p)
    named = sorted(n for n in os.listdir(p) if CKPT.match(n))
    regular = [n for n in named if stat.S_ISREG(os.lstat(os.path.join(p, n)).st_mode)]
    there = [n for n in regular if is_checkpoint(os.path.join(p, n))]
    mine = [n for n in regular if n not in there]
    if mine:  # a user's file of a checkpoint's name: never replaced, --overwrite or not
        raise refused(f"holds {', '.join(mine[:3])}, not a checkpoint packtool wrote (a torch.save file "
                      f"with its record), which packtool never replaces: move it, or give another "
                      f"{arg('save')} folder", d, p, cli_flag("save"))
    # a link, FIFO or folder of a checkpoint's name is check_new_file's to refuse by kind; a
    # checkpoint name that is not there is the target of a packtool temporary (a save cut short)
    refuse_foreign_files(p, d, "save", lambda n: n in there or (n in named and n not in regular)
                         or (bool(CKPT.match(n)) and not os.path.lexists(os.path.join(p, n))))
    for n in named:
        if n not in regular:
            check_new_file(os.path.join(d, n), "save", replace=True, mine="checkpoint")
    if there and not (overwrite or resuming):
        raise refused(f"holds checkpoint files ({', '.join(there[:3])}); pass {arg('overwrite', True)} "
                      f"to replace them, or give another {arg('save')} folder", d, p, cli_flag("save"))
    stray = [n for n in there if _rank(n) >= tp]
    if stray:
        raise refused(f"holds {', '.join(stray[:3])}, of a run of more tensor-parallel ranks than this "
                      f"one writes ({arg('tp', tp)}): it would stay beside the new checkpoint, a folder "
                      f"of two runs; remove the folder's checkpoint files, or give another "
                      f"{arg('save')} folder", d, p, cli_flag("save"))
    for n in there:
        check_new_file(os.path.join(d, n), "save", replace=True, mine="checkpoint")
    return p


def _rank(name: str) -> int:
    return int(name[len("mp_rank_"):-len(".pt")])


def data_record(man, vocab_size: Optional[int]) -> dict:
    """What a checkpoint records of the data it trained on: the tokenizer's identity as the
    manifest gives it and the vocabulary (the manifest's, or `vocab_size` for an output packed
    from token ids, whose manifest records none). The embedding's rows mean these tokens."""
    tok = man.raw.get("tokenizer") if isinstance(man.raw.get("tokenizer"), dict) else {}
    sha = tok.get("sha256")
    return {"vocab_size": vocab_size or man.vocab_size or None,
            "tokenizer_sha256": sha if isinstance(sha, str) else None,
            "tokenizer": os.path.basename(os.path.dirname(str(tok.get("path") or ""))) or None}


class _Writer:
    """The file torch.save writes through, keeping the write's own error: torch turns a write that
    failed (EFBIG, ENOSPC) into `RuntimeError: unexpected pos ...`, a "packtool bug" to the user."""

    def __init__(self, f):
        self.f, self.error = f, None

    def write(self, b) -> int:
        try:
            return self.f.write(b)
        except OSError as e:
            self.error = e
            raise

    def flush(self) -> None:
        self.f.flush()


def save_checkpoint(d: str, model, opt, step: int, shape: GPTShape, info, cfg, data: dict) -> None:
    if info.dp_rank != 0 or info.cp_rank != 0:
        return
    from packtool.output.files import write_file
    made = not os.path.isdir(d)
    os.makedirs(d, exist_ok=True)
    try:
        with write_file(ckpt_path(d, info.tp_rank), "save", replace=True, mine="checkpoint") as f:
            w = _Writer(f)
            try:
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step,
                            "shape": dataclasses.asdict(shape), "tp": info.tp, "data": data,
                            "flags": {"lr": cfg.lr, "seed": cfg.seed, "data_dir": cfg.data_dir}}, w)
            except Exception:
                if w.error is None:
                    raise
                raise w.error from None  # write_file says it as --save's file, with the fix
    except BaseException:
        if made:  # the folder this save made, left empty by its failure: nothing of the run's to keep
            try:
                os.rmdir(d)
            except OSError:
                pass
        raise


def state_bytes(model, opt) -> int:
    """The tensor bytes a checkpoint of `model` and `opt` holds, at least: the weights, and per
    optimized parameter AdamW's two fp32 moments (made at the first step) and its fp32 master
    where the model is not fp32."""
    sd = model.state_dict()
    weights = sum(t.numel() * t.element_size() for t in sd.values() if isinstance(t, torch.Tensor))
    per = 8 + (4 if opt.mixed else 0)
    return weights + sum(m.numel() for m in opt.master) * per


def check_room(d: str, need: int, info) -> None:
    """--save, before step 0: a checkpoint of `need` bytes must fit under the file size limit
    (`ulimit -f`) and in the disk's free space, or the run fails at its first save, after the
    training (an existing checkpoint there is replaced only once the new one is whole, so the
    whole size is needed). A lower bound: a save may still fail for room, and says so then."""
    import errno
    import resource

    from packtool.output.files import room_fix
    if info.dp_rank != 0 or info.cp_rank != 0:
        return
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    there = d
    while not os.path.isdir(there) and os.path.dirname(there) != there:
        there = os.path.dirname(there)
    try:
        st = os.statvfs(there)
        free = st.f_bavail * st.f_frsize
    except OSError:
        free = None
    for code, room, what in ((errno.EFBIG, limit if limit != resource.RLIM_INFINITY else None,
                              "the file size limit (`ulimit -f`) is"),
                             (errno.ENOSPC, free, "its disk has")):
        if room is not None and need > room:
            fix = room_fix(OSError(code, os.strerror(code)), arg("save"))
            raise PacktoolOutputError(
                f"cannot hold the checkpoint: {os.path.basename(ckpt_path(d, info.tp_rank))} needs at least "
                f"{_mib(need)} (the model's weights and AdamW state), but {what} {_mib(room)}; {fix}",
                path=d, flag=cli_flag("save"))


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"
