"""`packtool train`'s checkpoints: where --save may write, what it writes, and reading one back.

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
import pickle
import re
import stat
import warnings
from typing import Optional

import torch

from packtool.errors import PacktoolConfigError, PacktoolInputError, PacktoolOutputError, arg, cli_flag
from packtool.megatron.model import GPTShape

CKPT = re.compile(r"^mp_rank_\d{2,}\.pt\Z", re.ASCII)  # \Z: `$` would take a name ending in a newline
KEYS = ("model", "optimizer", "step", "shape", "tp")  # what save_checkpoint writes, flags aside


def ckpt_path(d: str, tp_rank: int) -> str:
    return os.path.join(d, f"mp_rank_{tp_rank:02d}.pt")


def check_save(d: str, load: Optional[str], overwrite: bool) -> str:
    """--save, before any work (packtool.output's rules): a folder (made if missing), not a link
    to nothing; checkpoint files already in it are replaced only with --overwrite or when it is
    the --load folder (a resumed run), never through a link. Returns the resolved folder."""
    from packtool.output.files import check_new_file, refuse_foreign_files, refuse_uri, resolve_folder
    from packtool.output.folder import refuse_inside_packed
    refuse_uri(d, "save")
    p = resolve_folder(d, "save")
    refuse_inside_packed(os.path.join(p, "mp_rank_00.pt"), "save", mine="checkpoint")  # its own folder only
    if os.path.lexists(p) and not os.path.isdir(p):
        raise PacktoolOutputError(f"exists and is not a folder; give a checkpoint folder as {arg('save')}",
                                  path=d, flag=cli_flag("save"))
    if not os.path.isdir(p):
        return p
    resuming = bool(load) and os.path.isdir(load) and os.path.samefile(load, p)
    there = sorted(n for n in os.listdir(p) if CKPT.match(n))
    if there and not (overwrite or resuming):
        raise PacktoolOutputError(f"holds checkpoint files ({', '.join(there[:3])}); pass {arg('overwrite', True)} "
                                  f"to replace them, or give another {arg('save')} folder", path=d, flag=cli_flag("save"))
    refuse_foreign_files(p, d, "save", lambda n: bool(CKPT.match(n)))
    for n in there:
        check_new_file(os.path.join(p, n), "save", replace=True, mine="checkpoint")
    return p


def data_record(man, vocab_size: Optional[int]) -> dict:
    """What a checkpoint records of the data it trained on: the tokenizer's identity as the
    manifest gives it and the vocabulary (the manifest's, or `vocab_size` for an output packed
    from token ids, whose manifest records none). The embedding's rows mean these tokens."""
    tok = man.raw.get("tokenizer") if isinstance(man.raw.get("tokenizer"), dict) else {}
    sha = tok.get("sha256")
    return {"vocab_size": vocab_size or man.vocab_size or None,
            "tokenizer_sha256": sha if isinstance(sha, str) else None,
            "tokenizer": os.path.basename(os.path.dirname(str(tok.get("path") or ""))) or None}


def save_checkpoint(d: str, model, opt, step: int, shape: GPTShape, info, cfg, data: dict) -> None:
    if info.dp_rank != 0 or info.cp_rank != 0:
        return
    from packtool.output.files import write_file
    os.makedirs(d, exist_ok=True)
    with write_file(ckpt_path(d, info.tp_rank), "save", replace=True, mine="checkpoint") as f:
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step,
                    "shape": dataclasses.asdict(shape), "tp": info.tp, "data": data,
                    "flags": {"lr": cfg.lr, "seed": cfg.seed, "data_dir": cfg.data_dir}}, f)


def _unreadable(path: str, why: str) -> PacktoolInputError:
    return PacktoolInputError(f"{why}: give {arg('load')} a folder `packtool train --save` wrote (an earlier "
                              f"save if this one is damaged), or start without {arg('load')}",
                              path=path, flag=cli_flag("load"))


def _open_regular(path: str):
    """`path` opened for reading if it is a regular file (through links), else refused by its
    kind: opened non-blocking, since open() of a FIFO with no writer blocks forever, and a device
    (/dev/zero) is no checkpoint."""
    from packtool.storage import kind_name
    mode = os.stat(path).st_mode  # first: open() of a socket fails with words of no use
    if not stat.S_ISREG(mode):
        raise _unreadable(path, f"is {kind_name(mode)}, not a regular file")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:  # again on what was opened: another kind may have taken the name meanwhile
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _unreadable(path, f"is {kind_name(mode)}, not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _read(path: str) -> object:
    try:
        with warnings.catch_warnings(), _open_regular(path) as f:
            warnings.simplefilter("ignore")  # torch's notes on legacy formats: the error below says it all
            return torch.load(f, map_location="cpu", weights_only=True)
    except PacktoolInputError:
        raise
    except MemoryError:
        raise
    except pickle.UnpicklingError as e:  # the weights-only unpickler refused it (torch's words are pages long)
        bad = re.search(r"unsupported GLOBAL ([\w.]+)", str(e))
        why = f"holds a Python object ({bad.group(1)})" if bad else "is damaged or holds Python objects"
        raise _unreadable(path, f"{why}, not only tensors and numbers: not a checkpoint packtool wrote, and "
                                "packtool never runs code from a checkpoint") from None
    except OSError as e:
        raise _unreadable(path, f"cannot be read ({e.strerror or e})") from None
    except Exception:  # torch's reader fails in its own ways on a cut or overwritten file
        raise _unreadable(path, "is damaged or incomplete (not a whole torch.save file)") from None


def load_checkpoint(d: str, tp_rank: int, tp: Optional[int] = None) -> dict:
    """The checkpoint of TP rank `tp_rank` in folder `d`, checked to be one `save_checkpoint`
    wrote (for a run of `tp` TP ranks, when given); its shape as a GPTShape under "shape"."""
    path = ckpt_path(d, tp_rank)
    if not os.path.exists(path):
        raise PacktoolInputError(f"{arg('load', d)}: no {os.path.basename(path)} (saved by "
                                 f"`packtool train --save`; TP rank {tp_rank}): give the folder a saved run wrote",
                                 path=d, flag=cli_flag("load"))
    ck = _read(path)
    lost = [k for k in KEYS if not isinstance(ck, dict) or k not in ck]
    if lost:
        raise _unreadable(path, f"has no {', '.join(map(repr, lost))}: not a checkpoint of `packtool train --save`")
    step, saved_tp = ck["step"], ck["tp"]
    if not (isinstance(ck["model"], dict) and isinstance(ck["optimizer"], dict) and isinstance(ck["shape"], dict)
            and all(type(v) is int and v >= 0 for v in (step, saved_tp))):
        raise _unreadable(path, "holds a model, optimizer, shape, step or tp of the wrong kind")
    if tp is not None and saved_tp != tp:
        raise PacktoolConfigError(f"was saved by a run of {saved_tp} tensor-parallel rank(s): give {arg('tp', saved_tp)} to resume it",
                                  path=path, flag=cli_flag("tp"))
    try:
        shape = GPTShape(**ck["shape"])
    except (TypeError, PacktoolConfigError) as e:
        raise _unreadable(path, f"holds a model shape packtool cannot build ({e})") from None
    return {**ck, "shape": shape, "path": path}


def check_resumed_shape(path: str, saved: GPTShape, given: dict) -> None:
    """A shape the caller named along with the checkpoint (CLI: the shape flags typed; library:
    `shape=`) must be the checkpoint's: the run goes on with the saved one, so another value
    would be dropped without a word."""
    off = [f"{arg(k, v)} (the checkpoint has {getattr(saved, k)})"
           for k, v in given.items() if v is not None and getattr(saved, k) != v]
    if off:
        raise PacktoolConfigError(f"{arg('load')} resumes the model the checkpoint holds, but "
                                  f"{', '.join(off)}: drop them, or start a new run without {arg('load')}",
                                  path=path, flag=cli_flag("load"))


def _named(rec: dict) -> str:
    name, sha = rec.get("tokenizer"), rec.get("tokenizer_sha256")
    return f"tokenizer {name or '?'} (sha256 {sha[:12]}, vocab_size {rec.get('vocab_size')})" if sha \
        else f"token ids of vocab_size {rec.get('vocab_size')}"


def check_resumed_data(ck: dict, now: dict, data_dir: str, given_vocab: Optional[int], tp: int) -> None:
    """The output a resumed run trains on must hold the tokens the checkpoint's embedding was
    trained on: another tokenizer (or vocabulary) gives its rows other meanings, and training
    goes on without an error. `now` is `data_record` of the output (and --vocab-size).
    Checkpoints written before the record existed are held to what they do record, their
    padded vocabulary (`padded_vocab(vocab, tp)`): a tokenizer of that same padded size
    cannot be told apart from theirs, and is let through."""
    from packtool.megatron.model import padded_vocab
    path, rec, vocab = ck["path"], ck.get("data"), now["vocab_size"]
    fix = f"train on an output packed with the checkpoint's tokenizer, or start a new run without {arg('load')}"
    if given_vocab is not None and isinstance(rec, dict) and rec.get("vocab_size") not in (None, given_vocab):
        raise PacktoolConfigError(f"{arg('load')} resumes the model the checkpoint holds, but {arg('vocab_size', given_vocab)} "
                                  f"(the checkpoint has {rec['vocab_size']}): drop it, or start a new run without "
                                  f"{arg('load')}", path=path, flag=cli_flag("vocab_size"))
    if isinstance(rec, dict):
        same_tok = None in (rec.get("tokenizer_sha256"), now["tokenizer_sha256"]) \
            or rec["tokenizer_sha256"] == now["tokenizer_sha256"]
        if not same_tok or None not in (rec.get("vocab_size"), vocab) and rec["vocab_size"] != vocab:
            raise PacktoolConfigError(f"was trained on {_named(rec)}, but {data_dir} holds {_named(now)}: {fix}",
                                      path=path, flag=cli_flag("load"))
        return
    saved = ck["shape"].vocab
    if vocab and padded_vocab(vocab, tp) != saved:
        what = arg('vocab_size', given_vocab) if given_vocab is not None else f"{data_dir}'s vocab_size {vocab}"
        raise PacktoolConfigError(f"holds a model of vocabulary {saved} (an older checkpoint: no tokenizer record), "
                                  f"but {what} pads to {padded_vocab(vocab, tp)}: {fix}",
                                  path=path, flag=cli_flag("load"))


def trained_vocab(ck: dict, now: dict, data_dir: str) -> Optional[int]:
    """The vocabulary a resumed checkpoint's embedding learned, to hold the ids of an output that
    records none to (`check_token_ids`): the model's padded vocabulary is larger, and its padding
    rows are no tokens. Where the checkpoint records a tokenizer and the output none (packed from
    token ids), nothing tells whether the ids are that tokenizer's tokens: a note says so."""
    rec = ck.get("data")
    if not isinstance(rec, dict):  # an older checkpoint: its padded vocabulary is all it records
        return None
    if rec.get("tokenizer_sha256") and not now["tokenizer_sha256"]:
        from packtool.notes import note
        note(f"{data_dir} records no tokenizer (packed from token ids): packtool cannot tell whether its ids are "
             f"tokens of the {_named(rec)} the checkpoint {ck['path']} was trained on; they are held below its "
             f"vocab_size {rec.get('vocab_size')} as they are read")
    return rec.get("vocab_size")


def restore(ck: dict, model, opt) -> int:
    """Weights and optimizer state of `load_checkpoint`'s `ck` into `model` and `opt`; the step to go on from."""
    path = ck["path"]
    try:
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
    except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as e:
        first = " ".join(str(e).split())[:160]
        raise _unreadable(path, f"does not fit the model its own shape describes ({first})") from None
    return ck["step"]
