"""Where the words after a repeatable option go (`verify --source a b c DIR`).

click gives a repeatable option (`multiple=True`: `--source`) one value per flag; a shell glob
after it (`--source data/*.jsonl`) gives it many words. The words that follow such an option
with no other flag between continue it; the command's positional argument is the word that
stands outside every such run. The rule is by position only, never by what a word names on
disk (a folder is a valid `--source` input, so "the folder is the output" swapped roles):

- exactly the positional words outside the runs: `verify DIR --source a b`, or
  `verify --source a b --quiet DIR`;
- none outside: the last word continuing a run is the positional (`verify --source a b DIR`,
  `verify --source a --source b DIR`); a run's own first value never is (`verify --source a`
  is still "missing DIR");
- more outside than the command takes: refused in one line that says how to write it;
- a flag the command does not know: the words are left as given, so click reports that flag
  (and its suggestion, `--tpx` -> `--tp`), not the value after it as an extra word.

The command line is rewritten to click's form (`--source a --source b ... -- DIR`) before
click parses it, so every repeatable option of every subcommand follows this one rule.
"""
from __future__ import annotations

from packtool.errors import shown


def _options(params) -> tuple[dict[str, bool], set[str]]:
    """Each option spelling -> whether it takes a value; the spellings of repeatable ones."""
    takes, many = {}, set()
    for p in params:
        if p.param_type_name != "option":
            continue
        for o in (*p.opts, *p.secondary_opts):
            takes[o] = not p.is_flag and not p.count
        if p.multiple and not p.is_flag:
            many.update(p.opts)
    return takes, many


def _option_at(a: str, takes: dict[str, bool]) -> tuple[str | None, bool]:
    """The option a flag word sets and whether its value is the next word: `--x=v` and `-Cv`
    carry theirs; `-qC` (short flags run together) sets its last. None: a word click will
    refuse itself (an unknown flag)."""
    name, eq, _ = a.partition("=")
    if a.startswith("--") or len(a) == 2:
        return (name, takes[name] and not eq) if name in takes else (None, False)
    for k, c in enumerate(a[1:], 1):
        o = "-" + c
        if o not in takes:
            return None, False
        if takes[o]:
            return o, k == len(a) - 1
    return "-" + a[-1], False


def split_words(params, args: list[str]) -> tuple[list[str], list[tuple[int, str]], list[str | tuple]] | None:
    """`args` as (positional words outside every run, (index in `kept`, word) of each word
    continuing a repeatable option, the flags and their values in order); None at a flag the
    command does not know: whether the word after it is its value is unknowable, so no word's
    role can be told (`verify out --tp 2`: `2` is no extra word, `--tp` is the mistake)."""
    takes, many = _options(params)
    free, runs, kept = [], [], []
    run, i = None, 0
    while i < len(args):
        a = args[i]
        if a == "--":  # everything after it is positional, as click reads it
            free += args[i + 1:]
            break
        if a.startswith("-") and a != "-":  # `-` alone is stdin, a positional word
            name, value_next = _option_at(a, takes)
            if name is None:
                return None
            kept.append(a)
            if value_next and i + 1 < len(args):
                kept.append(args[i + 1])
                i += 1
            run = name if name in many else None
        elif run is not None:
            runs.append((len(kept), a))
            kept.append((run, a))
        else:
            free.append(a)
        i += 1
    return free, runs, kept


def in_place(ctx, params, args: list[str]) -> list[str]:
    """`args` with every word that continues a repeatable option given its own flag and the
    positional words after `--` (module docstring: the rule)."""
    from packtool.cli.failure import click_exceptions
    slots = [p for p in params if p.param_type_name == "argument"]
    if any(o in args for o in ctx.help_option_names) or any(p.nargs != 1 for p in slots):
        return args  # --help: shown whatever else is there; a variadic positional reads them itself
    split = split_words(params, args)
    if split is None:
        return args  # click's parser meets the unknown flag first and names it, with its suggestion
    free, runs, kept = split
    if not runs and len(free) <= len(slots):
        return args
    if len(free) > len(slots):
        raise click_exceptions.UsageError(_extra_words(ctx, slots, free[len(slots):], kept), ctx=ctx)
    need = min(len(slots) - len(free), len(runs))
    for at, word in runs[len(runs) - need:] if need else ():
        kept[at] = None  # the last words of the runs fill the positionals left empty, in order
        free.append(word)
    out = []
    for k in kept:
        if isinstance(k, tuple):
            out += list(k)
        elif k is not None:
            out.append(k)
    return out + (["--", *free] if free else [])


def _takes(slots) -> tuple[str, str]:
    """What the command takes, said as a phrase, and its positionals as written on a command line."""
    names = [p.metavar or p.name.upper() for p in slots]
    if not names:
        return "no positional argument", ""
    said = f"one {names[0]}" if len(names) == 1 else f"{len(names)} arguments: {' '.join(names)}"
    return said, " " + " ".join(names)


def _extra_words(ctx, slots, extra: list[str], kept) -> str:
    many = next((k[0] for k in kept if isinstance(k, tuple)), None)
    if many is None:
        _, opts = _options(ctx.command.params)
        many = max(opts, key=len) if opts else None
    takes, names = _takes(slots)
    cmd = ctx.command_path
    said = f"unexpected extra argument(s) {' '.join(map(shown, extra))}: {cmd} takes {takes}"
    if many is None:
        return said
    return (f"{said}; the values of {many} go right after it: `{cmd}{names} {many} a b` or "
            f"`{cmd} {many} a {many} b{names}`")


def _once(p) -> bool:
    """An option whose last spelling wins in click: one value (`--tp 2`), or an on/off pair
    (`--eos/--no-eos`) whose two sides contradict; a plain switch (`-v`) repeated says nothing new."""
    if p.param_type_name != "option" or p.multiple or p.count:
        return False
    return not p.is_flag or bool(p.secondary_opts)


def _given(a: str, args: list[str], i: int, name: str, value_next: bool) -> str:
    """What the flag word at `i` sets its option to, as typed (for the error line)."""
    if value_next:
        return args[i + 1] if i + 1 < len(args) else ""
    if "=" in a and a.startswith("--"):
        return a.partition("=")[2]
    at = a.find(name[1:], 1) if not a.startswith("--") else -1
    return a[at + 1:] if at > 0 and at + 1 < len(a) else a


def repeated(params, args: list[str]) -> tuple[object, str, str, str] | None:
    """The first option of `params` that takes one value and is given twice in `args`, as (its
    parameter, the second spelling, the first value, the second value); None when none is.
    click keeps the last one silently (S34-7: `--side-columns a --side-columns b` packed only b)."""
    takes, _ = _options(params)
    of = {o: p for p in params if p.param_type_name == "option" for o in (*p.opts, *p.secondary_opts)}
    seen: dict[str, str] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            return None
        if a.startswith("-") and a != "-":
            name, value_next = _option_at(a, takes)
            if name is None:
                return None  # click names the unknown flag first
            p = of[name]
            if _once(p):
                value = _given(a, args, i, name, value_next)
                first = seen.get(p.name)
                # an on/off pair's same side twice (`-q --no-progress`) says nothing new: only both sides clash
                if first is not None and (not p.is_flag or (first in p.opts) != (name in p.opts)):
                    return p, name, first, value
                seen.setdefault(p.name, value)
            i += value_next
        i += 1
    return None
