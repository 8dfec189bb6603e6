"""How a `packtool train --save` checkpoint is known, by its contents: the one rule that
megatron.checkpoint (what --save may replace, what --load reads) and output.relations (no
output lands inside a checkpoint folder) both ask. It sits below the output rules because
relations may not import the train stage; torch is imported only when a file of a
checkpoint's name is there to judge.

A checkpoint is a `torch.save` file per tensor-parallel rank (`mp_rank_XX.pt`) whose record
holds save_checkpoint's keys; a file of that name is not one by its name alone (a user's own
`mp_rank_00.pt`, another trainer's).
"""
from __future__ import annotations

import os
import re
import stat
import warnings

CKPT = re.compile(r"^mp_rank_\d{2,}\.pt\Z", re.ASCII)  # \Z: `$` would take a name ending in a newline
KEYS = ("model", "optimizer", "step", "shape", "tp")  # what save_checkpoint writes, flags aside


def is_checkpoint(path: str) -> bool:
    """Whether the regular file `path` is a checkpoint save_checkpoint wrote: a torch.save zip
    whose record holds its keys. Read with the weights-only unpickler and its tensors mapped,
    not read: a checkpoint is large, and this only asks what it is. Without torch (no train
    extra) nothing can be judged packtool's: False."""
    try:
        import torch
    except ImportError:
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ck = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except MemoryError:
        raise
    except Exception:  # not a torch zip, or not only tensors and numbers: not packtool's
        return False
    return isinstance(ck, dict) and all(k in ck for k in KEYS)


def is_checkpoint_folder(folder: str) -> bool:
    """Whether `folder` holds a checkpoint packtool wrote (a plain file of a rank's name that
    `is_checkpoint`): what makes it a `train --save` folder."""
    try:
        names = [n for n in os.listdir(folder) if CKPT.match(n)]
    except OSError:
        return False
    for n in sorted(names):
        p = os.path.join(folder, n)
        try:
            plain = stat.S_ISREG(os.lstat(p).st_mode)  # never through a link: check_save's rule
        except OSError:
            continue
        if plain and is_checkpoint(p):
            return True
    return False


__all__ = ["CKPT", "KEYS", "is_checkpoint", "is_checkpoint_folder"]
