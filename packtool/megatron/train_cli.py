"""`packtool train DATA_DIR`: the typer command. Imports nothing heavy at import time.

Register with:  from packtool.megatron.train_cli import train_command
                app.command("train")(guarded(train_command))   # packtool.cli.failure: its errors' one line
"""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from packtool.errors import PacktoolConfigError, PacktoolInputError, spelled_as

_SHAPE_DEFAULTS = {"layers": 2, "hidden": 64, "heads": 4}
# TrainConfig's arguments whose flag FLAG_OF (packtool.cli.flags) does not list
_FLAGS = {"steps": "--steps", "lr": "--lr", "warmup": "--warmup", "log_every": "--log-every",
          "save_every": "--save-every", "vocab_size": "--vocab-size"}
_SHAPE_KEYS = ("layers", "hidden", "heads", "ffn", "kv_heads", "max_seq", "rope_base")


def _yaml_shape(path: str) -> dict:
    """The model shape keys of --config FILE (their values are GPTShape's to check)."""
    import yaml

    from packtool.storage import SETTINGS_BYTES, read_small
    data = read_small(path, SETTINGS_BYTES, "train --config file", "give the YAML file of the model shape "
                      "(a few lines, e.g. `layers: 2`)", flag="--config")
    try:
        raw = yaml.load(data, Loader=_once_loader(yaml))
    except _Twice as e:
        raise PacktoolInputError(f"line {e.line}: key {e.key!r} appears twice (first at line {e.first}); keep one "
                                 f"of them (lines count from 1)", path=path, flag="--config") from None
    except ValueError as e:  # yaml's int() of a number past Python's 4,300 digits (S48B-1)
        if "integer string conversion" not in str(e):
            raise
        raise PacktoolInputError(f"holds an integer longer than Python reads ({' '.join(str(e).split()[:9])}); "
                                 f"give the shape's numbers as written (e.g. `layers: 2`)", path=path,
                                 flag="--config") from None
    except yaml.YAMLError as e:  # the user's file, not a packtool bug; an unsafe tag (!!python/...) too
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        what = " ".join(str(getattr(e, "problem", None) or e).split())
        raise PacktoolInputError(f"is not a YAML file packtool reads{where} ({what}): give a mapping such as "
                                 f"`layers: 2` (plain YAML, no tags)", path=path, flag="--config") from None
    if raw is None or raw == {}:  # an empty file: a shape nobody wrote, the defaults taken without a word
        raise PacktoolInputError(f"holds no keys: give at least one of {list(_SHAPE_KEYS)} (e.g. `layers: 2`), "
                                 f"or leave out --config", path=path, flag="--config")
    if not isinstance(raw, dict):
        raise PacktoolInputError(f"holds a {type(raw).__name__}, not a mapping of keys: give e.g. `layers: 2`",
                                 path=path, flag="--config")
    bad = sorted(set(map(str, raw)) - set(_SHAPE_KEYS))  # vocab: the manifest's or --vocab-size
    if bad:
        raise PacktoolInputError(f"unknown keys {bad}; allowed: {list(_SHAPE_KEYS)} (see --config)", path=path,
                                 flag="--config")
    return raw


class _Twice(Exception):
    """A mapping of the --config file gives one key twice (YAML's loaders keep the last silently)."""

    def __init__(self, key, line: int, first: int):
        super().__init__(key)
        self.key, self.line, self.first = key, line, first


def _once_loader(yaml):
    """yaml.SafeLoader that refuses a key given twice in one mapping (at any depth), as packtool's
    JSON readers do: the first value would be dropped without a word. Keys compare as loaded
    (`1` and `0x1` are one key); a merge (`<<`) is YAML's own override, not a key given twice."""
    class Once(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                seen: dict = {}
                for k, _ in node.value:
                    if k.tag == "tag:yaml.org,2002:merge":
                        continue
                    key, line = self.construct_object(k, deep=True), k.start_mark.line + 1
                    try:
                        if key in seen:
                            raise _Twice(key, line, seen[key])
                        seen[key] = line
                    except TypeError:  # an unhashable key: SafeLoader's own error says so
                        continue
            return super().construct_mapping(node, deep)
    return Once


def _shape(man, typed: dict, yaml_keys: dict, config: str | None, vocab_size: int | None, tp: int):
    """GPTShape from the flags typed, --config's keys over them, and the defaults; a --config
    value GPTShape refuses is named as FILE: key, a flag's value as the flag."""
    from packtool.integers import INT32_MAX, int_value
    from packtool.megatron.model import GPTShape, padded_vocab
    kw = {**_SHAPE_DEFAULTS, **typed, **yaml_keys}
    with spelled_as({k: f"{config}: {k}" for k in yaml_keys}):
        if kw.get("ffn") is None:  # its default is made from hidden: hidden is checked first
            hidden = int_value("hidden", kw["hidden"], 1, INT32_MAX, error=PacktoolConfigError)
            kw["ffn"] = -(-int(hidden * 8 / 3) // 64) * 64
        kw["vocab"] = padded_vocab(_vocab(man, vocab_size), tp)
        kw.setdefault("max_seq", max(8192, man.alignment.usable))
        return GPTShape(**kw)


def _pick_device(device: str | None, err) -> str:
    """cuda when torch sees one, else cpu, in one line; an explicit --device is checked."""
    if device not in (None, "cpu", "cuda"):
        from packtool.errors import bad_choice
        raise bad_choice(PacktoolConfigError, "device", device, ("cpu", "cuda"))
    if device == "cpu":
        return device
    import torch
    has = torch.cuda.is_available()
    if device == "cuda" and not has:
        build = "a CPU-only build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}, no GPU visible"
        raise PacktoolConfigError(f"--device cuda, but torch {torch.__version__} sees no CUDA device "
                         f"({build}): pass --device cpu, or install a CUDA build of torch")
    if device is None:
        name = f" ({torch.cuda.get_device_name()})" if has else ""
        why = "" if has else ": torch sees no CUDA device (pass --device cuda to require one)"
        err.print(f"packtool train: device {'cuda' if has else 'cpu'}{name}{why}",
                  highlight=False, soft_wrap=True, markup=False)
    return "cuda" if has else "cpu"


def _vocab(man, given: int | None) -> int:
    """The model's vocabulary: the manifest's, or --vocab-size for a pre-tokenized output packed
    without --tokenizer (FORMAT.md: its tokenizer block is empty and its pads hold 0). The ids are
    held to it by the dataset's reader as train() reads them (`check_token_ids`), --load too."""
    if given is not None and given < 1:
        raise PacktoolConfigError(f"--vocab-size must be >= 1, got {given}")
    if man.vocab_size:
        if given is not None and given != man.vocab_size:
            raise PacktoolConfigError(f"--vocab-size {given} disagrees with tokenizer.vocab_size {man.vocab_size} in "
                             f"{man.manifest}; drop --vocab-size")
        return man.vocab_size
    if given is None:
        raise PacktoolConfigError(f"{man.manifest} records no vocabulary size (packed from token ids without "
                         f"--tokenizer): pass --vocab-size N, N above every token id, or re-pack with --tokenizer",
                                  flag="--vocab-size")
    if man.pad_id >= given:
        raise PacktoolConfigError(f"--vocab-size {given} is not above the pads' id {man.pad_id}; give a larger --vocab-size")
    return given


def train_command(
    data_dir: Annotated[str, typer.Argument(help="A `packtool pack` output directory.")],
    tp: Annotated[int, typer.Option("--tp", help="Tensor-parallel size (SP on when > 1).")] = 1,
    cp: Annotated[int, typer.Option("--cp", help="Context-parallel size (zigzag chunks, K/V all-gather).")] = 1,
    fp8: Annotated[str, typer.Option("--fp8", help="none | tensorwise | blockwise: FP8 GEMMs in the transformer's linear layers (Hopper or newer; the slabs must be packed for it). mxfp8 needs Blackwell and is refused.")] = "none",
    layers: Annotated[Optional[int], typer.Option("--layers", help="Transformer layers (default 2).")] = None,
    hidden: Annotated[Optional[int], typer.Option("--hidden", help="Hidden size (default 64).")] = None,
    heads: Annotated[Optional[int], typer.Option("--heads", help="Attention heads (default 4).")] = None,
    ffn: Annotated[Optional[int], typer.Option("--ffn", help="SwiGLU FFN size (default 8/3 x hidden, rounded to 64).")] = None,
    config: Annotated[Optional[str], typer.Option("--config", help="YAML with layers, hidden, heads, ffn, kv_heads and max_seq (overrides those flags).")] = None,
    load: Annotated[Optional[str], typer.Option("--load", help="Checkpoint directory from --save: model shape, weights, optimizer and step.")] = None,
    save: Annotated[Optional[str], typer.Option("--save", help="Checkpoint directory written at the end (and every --save-every steps).")] = None,
    vocab_size: Annotated[Optional[int], typer.Option("--vocab-size", help="Vocabulary size for an output packed without --tokenizer (its manifest records none); every token id must be below it; with --load, the checkpoint's.")] = None,
    save_every: Annotated[int, typer.Option("--save-every", help="Also save every N steps (0: only at the end).")] = 0,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace the checkpoint an earlier run saved in --save, as a whole (resuming into the --load folder needs no flag; a file that is not a packtool checkpoint is never replaced), and start anew a --json-log FILE that is not a packtool train log.")] = False,
    steps: Annotated[int, typer.Option("--steps", help="Optimizer steps to run.")] = 100,
    lr: Annotated[float, typer.Option("--lr", help="Peak learning rate (AdamW; warmup then cosine to 10%).")] = 3e-4,
    warmup: Annotated[int, typer.Option("--warmup", help="Linear warmup steps.")] = 0,
    micro_batch_tokens: Annotated[Optional[int], typer.Option("--micro-batch-tokens", help="Merge slabs into micro-batches of at most N tokens (tail pad charged once); N below the largest slab is refused.")] = None,
    grad_accum: Annotated[int, typer.Option("--grad-accum", help="Slabs per DP rank per step (ignored when the slabs carry a --dp plan).")] = 1,
    seed: Annotated[int, typer.Option("--seed", help="Weight init and per-epoch reshuffle seed.")] = 0,
    device: Annotated[Optional[str], typer.Option("--device", help="cpu | cuda (default: cuda when torch sees a GPU, else cpu; said in one line).")] = None,
    lm_head: Annotated[str, typer.Option("--lm-head", help="fused (Triton packtool.kernels.lm_head) | torch (megatron output layer + CE) | auto (fused on cuda, torch on cpu).")] = "auto",
    log_every: Annotated[int, typer.Option("--log-every", help="Print every N steps, and the last (0: only the last).")] = 10,
    json_log: Annotated[Optional[str], typer.Option("--json-log", help="Append one JSON line per step to FILE (created, or the log a run resumed with --load continues; another run's log or any other existing file needs --overwrite; never an input).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object at the end (the run's last step, its figures and notes) instead of the step table; an error is a JSON object too.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", "--no-progress", help="Taken as by every command (train shows no progress bar: the step table is its output; --json replaces it).")] = False,
) -> Optional[dict]:
    """Train a megatron-core GPTModel on packed slabs (THD, packtool's core attention).

    Run under torchrun for several GPUs: DP = world / (tp x cp).
    """
    from rich.console import Console
    err = Console(stderr=True)
    # a failure ends in packtool.cli.failure.guarded, the wrapper every command is registered with
    device = _pick_device(device, err)
    if lm_head not in ("fused", "torch", "auto"):
        from packtool.errors import PacktoolConfigError, bad_choice
        raise bad_choice(PacktoolConfigError, "lm_head", lm_head, ("fused", "torch", "auto"))
    if lm_head == "auto":  # the Triton head runs interpreted (slow) without a GPU
        lm_head = "fused" if device == "cuda" else "torch"
    from packtool.align import Alignment  # noqa: F401  (light: numpy only)
    from packtool.megatron.compat import check_training_layout
    from packtool.slabs.format import SlabManifest
    if fp8 != "none":  # a recipe this machine cannot run is refused before any re-pack advice
        from packtool.megatron.fp8 import check_recipe
        check_recipe(fp8, device)
    man = SlabManifest.read(data_dir, "data_dir")
    check_training_layout(man.alignment, tp, cp, tp > 1, fp8)
    from packtool.megatron.loop import TrainConfig, train
    shape, resume_shape = None, {}
    # the shape flags default to None so that one typed with --load is told from one left out
    typed = {k: v for k, v in (("layers", layers), ("hidden", hidden), ("heads", heads), ("ffn", ffn)) if v is not None}
    yaml_keys = _yaml_shape(config) if config else {}
    if load:  # the checkpoint holds the shape: what was typed or configured must agree with it
        resume_shape = {**typed, **yaml_keys}
        if vocab_size is not None:  # checked against the output here, against the checkpoint by train()
            _vocab(man, vocab_size)
    else:
        shape = _shape(man, typed, yaml_keys, config, vocab_size, tp)
    # TrainConfig's checks name this command's flags; train()'s max_seq check the key and its file
    max_seq = f"{config}: max_seq" if "max_seq" in yaml_keys else "--config's max_seq"
    with spelled_as({**_FLAGS, "max_seq": max_seq}):
        cfg = TrainConfig(data_dir=data_dir, shape=shape, tp=tp, cp=cp, steps=steps, lr=lr,
                          warmup=warmup, micro_batch_tokens=micro_batch_tokens, vocab_size=vocab_size,
                          grad_accum=grad_accum, seed=seed, device=device, lm_head=lm_head, fp8=fp8,
                          log_every=log_every, json_log=json_log, load=load, save=save,
                          save_every=save_every, overwrite=overwrite, resume_shape=resume_shape,
                          inputs=(config,) if config else (), quiet=json_out)
        res = train(cfg)  # its checks of --load and --vocab-size name these flags too
    return result_dict(cfg, res) if json_out else None


def result_dict(cfg, res) -> dict:
    """train's --json object (README: every command takes --json, S40-5): what the step table's
    last line and the header say, as numbers (a value that is not finite is null, as in
    --json-log)."""
    import dataclasses
    import json

    from packtool.megatron.finite import json_line
    last = json.loads(json_line(dataclasses.asdict(res.records[-1]))) if res.records else None
    return {"data_dir": cfg.data_dir, "params": res.params, "final_step": res.final_step,
            "steps_run": len(res.records), "last_step": last, "save": cfg.save, "json_log": cfg.json_log}
