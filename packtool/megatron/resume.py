"""Reading a `packtool train` checkpoint back for --load (checkpoint.py writes them): the file
opened by its kind and read with torch's weights-only unpickler and nothing else (a checkpoint
folder is often copied or shared, and a full unpickle of one runs whatever code its author put
in it), every value held to what save_checkpoint writes, and the resumed run's shape and data
held to the checkpoint's before any is used.
"""
from __future__ import annotations

import os
import pickle
import re
import stat
import warnings
from typing import Optional

import torch

from packtool.checkpoint_kind import CKPT, KEYS
from packtool.errors import PacktoolConfigError, PacktoolInputError, arg, cli_flag
from packtool.integers import INT32_MAX, INT64_MAX, short
from packtool.megatron.checkpoint import _rank, ckpt_path
from packtool.megatron.model import GPTShape

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


def _not_a_checkpoint_folder(d: str, tp_rank: int) -> str:
    """What --load names instead of a folder holding TP rank `tp_rank`'s checkpoint, said as what
    it is (README: a path that is not there or not the kind its argument takes is named as
    such), with the fix for that kind; the caller names the path and the flag."""
    from packtool.output.paths import describe_kind
    from packtool.output.relations import WHY, own_tree_kind
    name, fix = os.path.basename(ckpt_path(d, tp_rank)), f"give {arg('load')} the folder `packtool train --save` wrote"
    if not os.path.lexists(d):
        return f"no such folder; {fix}"
    if not os.path.isdir(d):
        if CKPT.match(os.path.basename(os.path.normpath(d))) and os.path.isfile(d):
            return f"is a checkpoint file; {arg('load')} takes the folder that holds it: " \
                   f"{arg('load', os.path.dirname(os.path.normpath(d)) or os.curdir)}"
        return f"is {describe_kind(d)}, not a checkpoint folder; {fix}"
    kind = own_tree_kind(d)
    if kind is not None and kind != "checkpoint":
        also = " (a packed output is train's DATA_DIR)" if kind == "packed" else ""
        return f"is {WHY[kind][0]}, not a checkpoint folder{also}; {fix}"
    ranks = sorted(n for n in os.listdir(d) if CKPT.match(n))
    if ranks:  # another TP rank's file only: the run that saved it had another --tp
        return (f"holds {', '.join(ranks[:3])} but no {name} (TP rank {tp_rank}'s checkpoint): it was saved by "
                f"a run of other tensor-parallel ranks; give the {arg('tp')} it was saved with")
    return f"holds no checkpoint (no {name}); {fix}"


def load_checkpoint(d: str, tp_rank: int, tp: Optional[int] = None) -> dict:
    """The checkpoint of TP rank `tp_rank` in folder `d`, checked to be one `save_checkpoint`
    wrote (for a run of `tp` TP ranks, when given); its shape as a GPTShape under "shape"."""
    path = ckpt_path(d, tp_rank)
    if not os.path.exists(path):
        raise PacktoolInputError(_not_a_checkpoint_folder(d, tp_rank), path=d, flag=cli_flag("load"))
    ck = _read(path)
    lost = [k for k in KEYS if not isinstance(ck, dict) or k not in ck]
    if lost:
        raise _unreadable(path, f"has no {', '.join(map(repr, lost))}: not a checkpoint of `packtool train --save`")
    _check_values(path, ck)
    saved_tp = ck["tp"]
    if tp is not None and saved_tp != tp:
        raise PacktoolConfigError(f"was saved by a run of {saved_tp} tensor-parallel rank(s): give {arg('tp', saved_tp)} to resume it",
                                  path=path, flag=cli_flag("tp"))
    others = sorted(n for n in os.listdir(d) if CKPT.match(n) and _rank(n) >= saved_tp)
    if others:  # the files of another run beside this one: which run is resumed is not clear
        raise _unreadable(path, f"was saved by a run of {saved_tp} tensor-parallel rank(s), but its folder also "
                                f"holds {', '.join(others[:3])}: a folder of two runs")
    try:
        shape = GPTShape(**ck["shape"])
    except (TypeError, PacktoolConfigError) as e:
        raise _unreadable(path, f"holds a model shape packtool cannot build ({e})") from None
    _check_weights(path, shape, ck["model"], saved_tp)
    from packtool.megatron.finite import check_loaded
    check_loaded(path, ck)  # NaN weights trained on: every step NaN, blamed on --lr
    return {**ck, "shape": shape, "path": path}


def _is_int(v, lo: int, hi: int) -> bool:
    return type(v) is int and lo <= v <= hi


def _check_values(path: str, ck: dict) -> None:
    """Every value `--load` goes by, held to what save_checkpoint writes before any is used: a
    damaged one is named as the checkpoint's (a step over 2^63-1 was called `start_step`, a
    vocab_size "x" a tokenizer of vocab_size x)."""
    rec = ck.get("data")  # absent in a checkpoint saved before the record existed
    sizes = rec if isinstance(rec, dict) else {}
    checks = [("model", isinstance(ck["model"], dict), "the model's state_dict"),
              ("optimizer", isinstance(ck["optimizer"], dict), "the optimizer's state"),
              ("shape", isinstance(ck["shape"], dict), "the model shape's keys"),
              ("step", _is_int(ck["step"], 0, INT64_MAX), "a step count from 0 to 2^63-1"),
              ("tp", _is_int(ck["tp"], 1, INT32_MAX), "a tensor-parallel size from 1"),
              ("data", rec is None or isinstance(rec, dict), "the record of the tokenizer trained on"),
              ("data.vocab_size", sizes.get("vocab_size") is None or _is_int(sizes["vocab_size"], 1, INT32_MAX),
               "a vocabulary size from 1 to 2^31-1"),
              *((f"data.{k}", sizes.get(k) is None or isinstance(sizes[k], str), "a name") for k in
                ("tokenizer", "tokenizer_sha256"))]
    for key, ok, want in checks:
        if not ok:
            value = ck.get(key) if "." not in key else sizes.get(key.split(".")[1])
            raise _unreadable(path, f"holds a {key} of the wrong kind ({short(value)}; {want} is written)")


_LAYER = re.compile(r"decoder\.layers\.(\d+)\.", re.ASCII)


def _check_weights(path: str, shape: GPTShape, model: dict, tp: int) -> None:
    """The saved shape against the saved weights, before a model of that shape is built: the shape
    sizes what is built (`layers: 10**6` over 2 layers' weights built for minutes, an ffn of 2^30
    allocated past any memory), the weights are what a resumed run goes on from. Each size the
    shape gives is held to a tensor it sizes (the layer count to the layers' keys); heads alone
    size no tensor (hidden/heads channels each), and restore() matches the rest."""
    layers = {int(m.group(1)) for k in model if isinstance(k, str) and (m := _LAYER.match(k))}
    if layers != set(range(shape.layers)):
        raise _unreadable(path, f"holds a model shape of {shape.layers} layer(s), but weights of layers "
                                f"{_spans(sorted(layers))}: damaged or edited")
    h, kv, hd = shape.hidden, shape.kv_heads or shape.heads, shape.hidden // shape.heads
    want = {"embedding.word_embeddings.weight": (shape.vocab // tp, h), "decoder.final_layernorm.weight": (h,)}
    for i in sorted(layers):
        at = f"decoder.layers.{i}."
        want.update({at + "self_attention.linear_qkv.weight": ((shape.heads + 2 * kv) * hd // tp, h),
                     at + "self_attention.linear_proj.weight": (h, shape.heads * hd // tp),
                     at + "mlp.linear_fc1.weight": (2 * shape.ffn // tp, h),
                     at + "mlp.linear_fc2.weight": (h, shape.ffn // tp)})
    for key, dims in want.items():
        got = tuple(model[key].shape) if isinstance(model.get(key), torch.Tensor) else None
        if got != dims:
            had = "none" if got is None else "x".join(map(str, got)) or "a scalar"
            raise _unreadable(path, f"holds a model shape whose {key} is {'x'.join(map(str, dims))} (tp {tp}), "
                                    f"but its weights there are {had}: damaged or edited")


def _spans(ns: list[int]) -> str:
    return "none" if not ns else f"{ns[0]}..{ns[-1]} ({len(ns)})" if ns == list(range(ns[0], ns[-1] + 1)) \
        else ", ".join(map(str, ns[:5])) + (" ..." if len(ns) > 5 else "")


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
