"""packtool's one error type: every user-facing failure is a `PacktoolError`, one line naming
the file (and row, or flag) and the fix.

    PacktoolError            base; `kind` and `exit_code` say how the CLI reports it
      PacktoolInputError     bad input data, tokenizer or template (kind "input")
      PacktoolConfigError    flags that cannot work together: alignment, plan (kind "config")
      PacktoolCacheError     a tokenized cache that cannot be used, or a cache root refused (kind "cache")
      PacktoolFormatError    a packed output this packtool cannot read (kind "format")
      PacktoolOutputError    an --output packtool will not write to, or is busy (kind "output")

A place packtool refuses to write, or a store refusing a request, is the kind of the argument that
named it (`argument_kind`, `place_error`; storage.uri's `store_error`).

The CLI prints `error: <message>` (escaped: user text is never read as markup) and exits with
`exit_code` (2 for all of these; 1 is kept for "verify found problems"). The base derives
from ValueError so that callers written against the older error types keep working.
"""
from __future__ import annotations

import re
from contextlib import contextmanager

EXIT_OK = 0
EXIT_PROBLEMS = 1  # verify ran and found problems
EXIT_USAGE = 2  # bad usage, input, config, cache, format or output path
EXIT_INTERNAL = 3  # a bug in packtool (not the user's fault): report it with --debug


# C0, DEL and C1 controls (an ESC starts a terminal command: clear the screen, retitle the
# window, rewrite a line), the bidirectional overrides that reorder what a line shows, and lone
# surrogates: a file name's bytes that are not UTF-8, as Python holds them (surrogate escapes),
# shown as the bytes they were (`o_\xfe`, S44-4)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escaped(m: re.Match) -> str:
    c = m.group()
    if 0xDC80 <= ord(c) <= 0xDCFF:  # a surrogate escape: the byte itself
        return f"\\x{ord(c) - 0xDC00:02x}"
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def shown(text: object) -> str:
    """`text` (a path, a value: what a user or a third party named) as packtool prints it: every
    control character written as its escape (`\\n`, `\\x1b`), so that a file name never sends the
    terminal a command nor breaks the line it stands in. The one rule for every line packtool
    prints (errors, notes, warnings, results); --json keeps the exact text, JSON-escaped."""
    return _CONTROL.sub(_escaped, str(text))


def one_line(text: object) -> str:
    """Fold whitespace (newlines included) so that a message is always a single line, and write
    any other control character as its escape (`shown`)."""
    return shown(" ".join(str(text).split()))


MESSAGE_MAX = 2000  # characters: a message quoting a whole value (a 2M-id list, a 3M-character role) was 16 MB


def bounded(text: str) -> str:
    """`text` whole up to MESSAGE_MAX characters; beyond, its middle left out (said so), keeping
    the head (what and where) and the tail (the fix) (S48A-4)."""
    if len(text) <= MESSAGE_MAX:
        return text
    head, tail = text[:MESSAGE_MAX * 3 // 5], text[-(MESSAGE_MAX // 4):]
    return f"{head} … [{len(text) - len(head) - len(tail):,} characters left out] … {tail}"


_LINE = re.compile(r"\bline \d")
_ROWS = re.compile(r"\brows? \d")  # "rows 0..63", "after row 5": rows named in the text
_ROWS_BASE = re.compile(r"\brows\b[\w ,]*count from 0")  # "rows count from 0", "rows and tokens count from 0"
_LEADING_FLAG = re.compile(r"(--[a-z][a-z0-9-]*|-[A-Za-z])(?=[\s:,]|$)")


def number_base(text: str, has_row: bool) -> str | None:
    """What a message's numbers count from, said in it (README, error contract): a row of data
    counts from 0 (as `source_index` and Python do), a line of a text file from 1 (as editors
    do)."""
    line = _LINE.search(text) is not None and "count from 1" not in text
    # "(tokens count from 0)" says nothing of rows: only a base naming rows stands for theirs
    if (has_row or _ROWS.search(text)) and not _ROWS_BASE.search(text):
        return "rows count from 0, lines from 1" if line else "rows count from 0"
    return "lines count from 1" if line else None


# --- naming the argument at fault -------------------------------------------------------
# A library check names the argument its caller passed (`capacity`), the command line its
# flag (`--max-tokens`), a wrapper its own argument (`bin_capacity`): one message, spelled by
# whoever called. The spelling in force is a plain table, set for a call by `spelled_as`.
_SPELLING: dict[str, str] = {}


def arg(name: str, value: object = ..., choices: tuple | None = None) -> str:
    """Argument `name` as the caller spells it, with `value` or `choices` when given: library
    `capacity=4096`, `overflow='split'|'truncate'`; command line `--max-tokens 4096`,
    `--overflow split|truncate`. A switch given True or False is its flag or its `--no-` side
    (only for switches that have one: `--bos/--no-bos`)."""
    said = _SPELLING.get(name, name)
    flag = said.startswith("-")
    if choices is not None:
        return f"{said} {'|'.join(map(str, choices))}" if flag else f"{said}={'|'.join(map(repr, choices))}"
    if value is ...:
        return said
    if value is True and flag:  # a switch: `--overwrite`, not `--overwrite True`
        return said
    if value is False and flag:  # a switch's off side (`--eos/--no-eos`): `--no-eos`
        return f"--no-{said[2:]}"
    return f"{said} {value}" if flag else f"{said}={value!r}"


def spelling_now() -> dict[str, str]:
    """The spelling in force, for work done in another process (a Ray task) to say the same."""
    return dict(_SPELLING)


def cli_flag(name: str) -> str | None:
    """The flag that sets `name` when the command line called (for `--json`'s `flag` and a
    message's "(see --flag)"), None for a library caller: its message names the path or value.
    None too where the running command has no such flag (`takes`): no flag set it."""
    said = _SPELLING.get(name, name)
    return said if said.startswith("-") and name not in _NOT_TAKEN else None


# The arguments the running command has no flag for (cli.parsing sets them as a command starts;
# a library caller gives any). The library's checks are shared by every command, and a fix
# offering one of them named a flag the command lacks (`verify --source REPO`: "pass --split
# train", S49A-10): such a fix asks `takes` and offers what the caller can give instead.
_NOT_TAKEN: set[str] = set()


def takes(name: str) -> bool:
    """Whether the caller can give argument `name`: a library caller any, a command its own."""
    return name not in _NOT_TAKEN


@contextmanager
def taking_only(absent: set[str]):
    """Within this block the caller has no argument in `absent` (`takes`); as before after it."""
    before = set(_NOT_TAKEN)
    _NOT_TAKEN.clear()
    _NOT_TAKEN.update(absent)
    try:
        yield
    finally:
        _NOT_TAKEN.clear()
        _NOT_TAKEN.update(before)


@contextmanager
def spelled_as(names: dict[str, str]):
    """Within this block, `arg` spells the arguments in `names` as given (a flag starts with
    '-'); the spelling outside comes back after it."""
    before = dict(_SPELLING)
    _SPELLING.update(names)
    try:
        yield
    finally:
        _SPELLING.clear()
        _SPELLING.update(before)


def bad_choice(cls: type, name: str, value: object, choices) -> "PacktoolError":
    """A `cls` error for argument `name` given `value`, not one of `choices`. On the command line it
    is a usage error (`usage`): the CLI adds the command's --help to it, as click's own do."""
    e = cls(f"{arg(name)} must be one of {', '.join(map(str, choices))}, got {value!r}", flag=cli_flag(name))
    e.usage = True
    return e


def missing(cls: type, name: str, message: str, **where) -> "PacktoolError":
    """A `cls` error for argument `name` left out where the call needs it (`message` says so). On the
    command line a required flag left out is a usage error, as click's own `Missing option` is."""
    e = cls(message, flag=cli_flag(name), **where)
    e.usage = True
    return e


class PacktoolError(ValueError):
    """Base of every error packtool raises for a user to act on. The message is one line."""

    kind = "error"
    exit_code = EXIT_USAGE
    usage = False  # a flag's value the command line could not take (bad_choice): a usage error there

    def __init__(self, message: str = "", *, path: str | None = None, row: int | None = None,
                 flag: str | None = None, details: dict | None = None) -> None:
        where = ", ".join(p for p in (shown(path) if path is not None else None,  # `in\\nx.jsonl`, not two lines
                                       f"row {row}" if row is not None else None) if p)
        text = bounded(one_line(message))
        lead = _LEADING_FLAG.match(text)
        if flag is None and lead:  # "--tp must be ...": the flag at fault, for --json's `flag`
            flag = lead.group(1)
        if flag is not None and flag not in text:
            text += f" (see {flag})"
        base = number_base(text, row is not None)
        if base:
            text += f" ({base})"
        super().__init__(f"{where}: {text}" if where else text)
        self.path = path
        self.row = row
        self.flag = flag
        self.details = dict(details or {})  # more of where, for --json (a side column's column, token)

    def to_dict(self) -> dict:
        """The `--json` form of the error."""
        return {"error": {"kind": self.kind, "type": type(self).__name__, "message": str(self),
                          "path": None if self.path is None else str(self.path), "row": self.row,
                          "flag": self.flag, "exit_code": self.exit_code, **self.details}}


class PacktoolInputError(PacktoolError):
    """Bad input data, tokenizer, template or flag value."""

    kind = "input"


class PacktoolConfigError(PacktoolError):
    """A configuration that cannot work: alignment flags, packing policy, capacity."""

    kind = "config"


class PacktoolCacheError(PacktoolError):
    """A tokenized cache that is damaged, stale or unreadable; the message says the fix."""

    kind = "cache"


class PacktoolFormatError(PacktoolError):
    """A packed output (manifest or shard) that this packtool cannot read."""

    kind = "format"


class PacktoolOutputError(PacktoolError):
    """An --output that packtool will not write to (not its own, inside an input, busy)."""

    kind = "output"


_CACHE_ARGUMENTS = frozenset({"cache_dir", "PACKTOOL_CACHE_DIR"})
_OUTPUT_ARGUMENTS = frozenset({"output", "o", "html", "save", "json_log"})


def argument_kind(argument: str | None) -> str:
    """The kind of the argument `argument` (its name, or its flag as spelled): `cache` for
    --cache-dir / PACKTOOL_CACHE_DIR, `output` for a place packtool writes (-o, --html, --save,
    --json-log), `input` for every other (what packtool reads: inputs, a packed output's DIR,
    --source). The README's exit table gives a refusal of a place the kind of the argument that
    named it: a wrapper that routes on `kind` clears or moves the cache, not the output."""
    name = (argument or "").lstrip("-").replace("-", "_")
    if name in _CACHE_ARGUMENTS or argument in _CACHE_ARGUMENTS:
        return "cache"
    return "output" if name in _OUTPUT_ARGUMENTS else "input"


def place_error(argument: str | None) -> type[PacktoolError]:
    """The class of a refusal of a place packtool writes, named by `argument` (argument_kind):
    PacktoolCacheError for the cache's, PacktoolOutputError for -o, --html, --save (and for a
    written place no argument named). The one rule every place check asks."""
    return PacktoolCacheError if argument_kind(argument) == "cache" else PacktoolOutputError


class PacktoolIndexError(PacktoolInputError, IndexError):
    """A row or slab index out of range. Also an IndexError: a sequence's `__getitem__` ends
    iteration (and `datasets`, torch's samplers) by raising one."""


__all__ = ["PacktoolError", "PacktoolIndexError", "PacktoolInputError", "PacktoolConfigError", "PacktoolCacheError",
           "PacktoolFormatError", "PacktoolOutputError", "arg", "argument_kind", "bad_choice", "missing", "cli_flag", "one_line", "shown", "spelling_now", "spelled_as", "takes", "taking_only", "EXIT_OK", "EXIT_PROBLEMS",
           "EXIT_USAGE", "EXIT_INTERNAL"]
