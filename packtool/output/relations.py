"""Where an --output may not be relative to the other paths of a run
(packtool.output's first checks): not the working directory or above it, not holding or
inside an input, not holding or inside the tokenized cache (folder.check_cache_dir: where the
cache may not be). Paths are compared as real paths (links resolved)."""
from __future__ import annotations

import glob
import os
from typing import Iterable

from packtool.errors import PacktoolOutputError, arg, cli_flag


def real_path(p: str) -> str:
    return os.path.realpath(os.path.abspath(os.path.expanduser(p)))


def is_inside(child: str, parent: str) -> bool:
    """child == parent or child below parent (both real paths)."""
    return child == parent or child.startswith(parent.rstrip(os.sep) + os.sep)


def input_paths(inputs: Iterable[str]) -> list[str]:
    out = []
    for s in inputs:
        if not s:
            continue
        s = os.path.expanduser(str(s))
        out += [s] if os.path.exists(s) else (glob.glob(s, recursive=True) or [s])
    return out


def check_relations(output: str, inputs: Iterable[str] = (), cache_dir: str | None = None,
                    shown: str | None = None) -> None:
    """Refuse an --output that is or holds the working directory, holds an input or lies
    inside an input folder, or holds or lies inside the tokenized cache (whose clean-up and
    reuse would meet the slabs), in one line each."""
    out, output = real_path(output), shown or output
    cwd = real_path(os.getcwd())
    if is_inside(cwd, out):
        what = "the working directory" if out == cwd else f"the working directory {cwd}"
        raise PacktoolOutputError(f"is {what} or holds it; give a new folder, e.g. "
                                  f"{arg('output', 'packed/')}", path=output, flag=cli_flag("output"))
    for p in input_paths(inputs):
        rp = real_path(p)
        if is_inside(rp, out):
            raise PacktoolOutputError(f"holds the input {p}; give an {arg('output')} outside the "
                                      f"inputs", path=output, flag=cli_flag("output"))
        if os.path.isdir(rp) and is_inside(out, rp):
            raise PacktoolOutputError(f"is inside the input folder {p} (a later pack of it would "
                                      f"read the slabs as data); give an {arg('output')} outside it",
                                      path=output, flag=cli_flag("output"))
    if cache_dir and is_inside(real_path(cache_dir), out):
        raise PacktoolOutputError(f"holds the tokenized cache {cache_dir}; give another {arg('output')} "
                                  f"(or {arg('cache_dir')})", path=output, flag=cli_flag("output"))
    if cache_dir and is_inside(out, real_path(cache_dir)):
        raise PacktoolOutputError(f"is inside the tokenized cache folder {cache_dir} (its clean-up "
                                  f"and reuse are packtool's, not a place for slabs); give an "
                                  f"{arg('output')} outside it (or another {arg('cache_dir')})", path=output,
                                  flag=cli_flag("output"))


__all__ = ["check_relations", "input_paths", "is_inside", "real_path"]
