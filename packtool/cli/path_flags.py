"""Every path flag and argument of every command (flags.PATH_PARAMS) as typed, once, before any
work (cli.failure.guarded calls it first): an empty value is refused, and `~` is expanded by the
one rule (params.expanded, which refuses a `~user` of no user).

An empty value is what an unset shell variable gives (`--save "$CKPT"`): click hands it over as
'', and the commands read '' as "not given", so `train --save ''` trained and saved nothing, exit
0, `inspect --plan ''` said "give one of DIR, --lengths or --plan", `pack ''` ended in an internal
error. Here it is one usage line naming the flag and what it takes, whichever command."""
from __future__ import annotations

from packtool.cli.flags import PATH_PARAMS
from packtool.cli.store_flags import LOCAL_WRITES, PARAM_ARG

# what each path parameter names: the fix says what to give instead of ''
WHAT = {"inputs": "a data file, folder, glob or dataset name", "output": "the output folder",
        "cache_dir": "a cache folder", "tokenizer": "tokenizer.json or a model folder",
        "chat_template": "a template name (chatml, llama3, mistral, none) or a .jinja file",
        "lengths": "the lengths file", "plan_file": "a plan file from `packtool plan --output`",
        "directory": "a packed output folder", "data_dir": "a packed output folder",
        "source": "the files the output was packed from", "config": "the model's YAML config file",
        "load": "a checkpoint folder", "save": "a checkpoint folder", "json_log": "a log file such as train.jsonl",
        "html": "a report file such as report.html"}
COMMAND_WHAT = {("plan", "output"): "a plan file such as plan.parquet"}
# the places a command writes (the others it reads): an empty one is an output error
WRITES = {**LOCAL_WRITES, "pack": {"output", "cache_dir"}, "verify": {"cache_dir"}}


def _values(v) -> list:
    return list(v) if isinstance(v, (list, tuple)) else [v]


def check_path_flags(command: str | None, args: dict) -> None:
    """Refuse an empty path in `command`'s path parameters (`args`, by name, changed in place:
    each value `~`-expanded) before any work."""
    from packtool.errors import PacktoolInputError, PacktoolOutputError, arg, cli_flag
    from packtool.params import blank, expanded
    for name in sorted(PATH_PARAMS.get(command or "", ())):
        v, said = args.get(name), PARAM_ARG.get(name, name)
        error = PacktoolOutputError if name in WRITES.get(command, ()) else PacktoolInputError
        for x in _values(v):
            how = blank(x) if isinstance(x, str) else None
            if how:  # blank too: a folder named ' ' made here, a name no message shows
                how += " (as an unset shell variable gives it)" if x == "" else ""
                e = error(f"{arg(said)} {how}; give "
                          f"{COMMAND_WHAT.get((command, name), WHAT[name])}", flag=cli_flag(said))
                e.usage = True  # a value the flag cannot take, as click's own "Invalid value"
                raise e
        if isinstance(v, str):
            args[name] = expanded(v, said, error)
        elif isinstance(v, (list, tuple)):
            args[name] = type(v)(expanded(x, said, error) if isinstance(x, str) else x for x in v)


__all__ = ["COMMAND_WHAT", "WHAT", "WRITES", "check_path_flags"]
