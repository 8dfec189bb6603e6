"""Which of a command's arguments an error is about, from the error's own `path` (a
PacktoolError's) or `filename` (an OSError's): the flag that gave that file or folder, for
`--json`'s `flag` when the raiser left it unset, and the role of that place, the `kind` of
an error there that no packtool rule classified (a store that refuses a request, the operating
system refusing a read or a write). The flag is never guessed from the message's text: a fix
quotes other flags (`... --split for a dataset`, `packtool plan --output`).
"""
from __future__ import annotations

import fnmatch
import os

from packtool.errors import argument_kind

# a command's parameter -> (its flag, None for a positional argument; the kind of an unclassified
# failure there: the argument's, errors.argument_kind, the rule a library error asks too).
# `config` is train's alone: pack's is a dataset configuration's name, not a file.
_FLAGS = {"output": "--output", "html": "--html", "save": "--save", "json_log": "--json-log",
          "cache_dir": "--cache-dir", "lengths": "--lengths", "plan_file": "--plan", "load": "--load",
          "tokenizer": "--tokenizer", "chat_template": "--chat-template", "source": "--source", "inputs": None,
          "directory": None, "data_dir": None}
PLACES = {name: (flag, argument_kind(name)) for name, flag in _FLAGS.items()}
COMMAND_PLACES = {"train": {"config": ("--config", argument_kind("config"))}}


def _key(spec: str) -> str:
    """A place as errors name it: a store URI without its query and user info (storage.shown),
    a local path made absolute and normal (`./out/./` is `out`). A `~` that names no home (an
    empty HOME, a `~user` of no user) is the path flags' to refuse: here it is no place, and
    never `/x`."""
    from packtool.errors import PacktoolError
    from packtool.params import expanded
    from packtool.storage import is_uri, shown
    if is_uri(spec):
        return shown(spec).rstrip("/")
    try:
        return os.path.abspath(expanded(spec))
    except PacktoolError:
        return os.path.abspath(spec)


def place_of(where: object, args: dict, command: str | None = None) -> tuple[str | None, str] | None:
    """(flag, role) of the argument in `args` (`command`'s parameters by name) that `where` is
    or lies below; the deepest when several hold it (an --output inside an input folder)."""
    if not isinstance(where, (str, os.PathLike)) or not str(where):
        return None
    at = _key(os.fspath(where))
    best, depth = None, -1
    for name, (flag, role) in {**PLACES, **COMMAND_PLACES.get(command or "", {})}.items():
        given = args.get(name)
        for spec in given if isinstance(given, (list, tuple)) else [given]:
            if not isinstance(spec, str) or not spec:
                continue
            top = _key(spec)
            below = at == top or at.startswith(top.rstrip("/") + "/") or (
                any(c in spec for c in "*?[") and fnmatch.fnmatchcase(at, top))  # an input glob
            if below and len(top) > depth:
                best, depth = (flag, role), len(top)
    return best


__all__ = ["PLACES", "place_of"]
