"""The command line's flags: which flag sets each library argument (`FLAG_OF`, what the
library's checks are spelled as on the command line), and the options several subcommands
share, declared once (docs/DESIGN.md §8).
"""
from __future__ import annotations

from typing import Annotated, Optional

import typer

# The flag that sets each library argument: a library check names the argument (`capacity`),
# the command line this flag (errors.arg / spelled_as). Only arguments whose flag is not the
# argument's own name with dashes need to differ, but every one a check names is listed.
FLAG_OF = {"capacity": "--max-tokens", "tp": "--tp", "cp": "--cp", "sp": "--sp", "fp8": "--fp8",
           "fixed_length": "--fixed-length", "convention": "--convention", "algorithm": "--algorithm",
           "overflow": "--overflow", "dp": "--dp", "seed": "--seed", "workers": "--workers",
           "plan_shard_rows": "--plan-shard-rows", "ray_address": "--ray-address", "output": "--output", "overwrite": "--overwrite",
           "dry_run": "--dry-run", "cache_dir": "--cache-dir", "engine": "--engine", "tokenizer": "--tokenizer",
           "chat_template": "--chat-template", "shape": "--shape", "prompt_field": "--prompt-field",
           "response_field": "--response-field", "text_field": "--text-field", "add_bos": "--bos", "add_eos": "--eos",
           "on_empty": "--on-empty", "side_columns": "--side-columns", "support_columns": "--support-columns",
           "split": "--split", "config": "--config", "lengths": "--lengths", "column": "--column",
           "plan": "--plan", "html": "--html", "save": "--save", "load": "--load", "json_log": "--json-log",
           "shard_tokens": "--shard-tokens", "max_problems": "--max-problems", "device": "--device",
           "lm_head": "--lm-head", "micro_batch_tokens": "--micro-batch-tokens", "grad_accum": "--grad-accum",
           "layers": "--layers", "hidden": "--hidden", "heads": "--heads", "ffn": "--ffn",  # train's too
           # the inputs: `pack`'s arguments (INPUTS, as its usage line names them), `verify`'s --source
           "inputs": "INPUTS", "source": "--source",
           # verify's and inspect's DIR, train's DATA_DIR: a store's later requests name them too
           "directory": "DIR", "data_dir": "DATA_DIR"}  # their ranges: params.RANGES

# Flags whose one value is a comma-separated list: given twice, the fix is both lists in one
# (parsing._refuse_repeated), as a user repeating them per name (as --source invites) meant
LIST_FLAGS = {"--side-columns", "--support-columns"}

# Each subcommand's parameters that name a path: `~` in them is expanded in one place
# (cli.path_flags, params.expanded; an empty value refused), so a quoted '~/x' is the same folder to every subcommand
PATH_PARAMS = {"plan": {"lengths", "output"}, "pack": {"inputs", "output", "cache_dir", "tokenizer", "chat_template"},
               "inspect": {"directory", "lengths", "plan_file", "html"},
               "verify": {"directory", "source", "tokenizer", "chat_template", "cache_dir"},
               "train": {"data_dir", "config", "load", "save", "json_log"}}

# Flags shared by every subcommand that takes them (docs/DESIGN.md §8).
MaxTokens = Annotated[int, typer.Option("--max-tokens", "-C", help="Slab capacity C in tokens.")]
Tp = Annotated[int, typer.Option("--tp", help="Tensor-parallel size.")]
Cp = Annotated[int, typer.Option("--cp", help="Context-parallel size (zigzag, 2*cp chunks per sequence).")]
Sp = Annotated[Optional[bool], typer.Option("--sp/--no-sp", help="Sequence parallelism (default: on when tp>1; with --tp 1 it is off, as in megatron-core).")]
Fp8 = Annotated[str, typer.Option("--fp8", help="FP8 recipe: none, tensorwise, mxfp8 or blockwise.")]
FixedLength = Annotated[Optional[int], typer.Option("--fixed-length", help="Every slab exactly this long (PP / static shapes).")]
Convention = Annotated[str, typer.Option("--convention", help="Layout rules: packtool, skyrl, nemo-rl, verl or per-sequence.")]
Algorithm = Annotated[str, typer.Option("--algorithm", "-a", help="Packer: ffd, bfd, mffd or balanced.")]
Overflow = Annotated[Optional[str], typer.Option("--overflow", help="Footprint over capacity: error, singleton, truncate or split (default per algorithm).")]
Dp = Annotated[int, typer.Option("--dp", help="Data-parallel ranks: slab count a multiple of dp, compute-balanced steps.")]
Seed = Annotated[int, typer.Option("--seed", help="Seed of the slab-order shuffle.")]
JsonOut = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", "--no-progress", help="No progress bar (pack's spelling works too).")]
# Tokenization flags, shared by `pack` and `verify --source`.
Tokenizer = Annotated[Optional[str], typer.Option("--tokenizer", help="tokenizer.json or a model folder (no hub).")]
ChatTemplate = Annotated[Optional[str], typer.Option("--chat-template", help="chatml, llama3, mistral, none or a FILE.jinja (default: the folder's).")]
Shape = Annotated[Optional[str], typer.Option("--shape", help="One of auto, tokens, text, chat, sharegpt, alpaca, prompt_completion, fields (default auto).")]
PromptField = Annotated[Optional[str], typer.Option("--prompt-field", help="Prompt column of any two-field data (with --response-field).")]
ResponseField = Annotated[Optional[str], typer.Option("--response-field")]
TextField = Annotated[Optional[str], typer.Option("--text-field", help="Text column (default: text).")]
AddBos = Annotated[Optional[bool], typer.Option("--bos/--no-bos", help="Prepend BOS (default: when the tokenizer has one, unless its tokenizer_config.json says add_bos_token false).")]
AddEos = Annotated[Optional[bool], typer.Option("--eos/--no-eos", help="Append EOS (default per shape).")]
OnEmpty = Annotated[Optional[str], typer.Option("--on-empty", help="Empty or all-masked rows: error or skip (skips are counted; default error).")]
CacheDir = Annotated[Optional[str], typer.Option("--cache-dir", help="Tokenized cache root (default ~/.cache/packtool), or an object-store URI (s3://bucket/cache) shared by every machine: entries are pulled into a local mirror, new ones pushed with cache.json last.")]
