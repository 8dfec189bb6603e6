"""Where an --output may not be relative to the other paths of a run
(packtool.output's first checks): not the working directory or above it, not holding or
inside an input, not holding or inside the tokenized cache (folder.check_cache_dir: where the
cache may not be). Paths are compared as real paths (links resolved).

Two rules here hold for everything packtool writes (a pack output folder, a file such as a
plan, report, log or checkpoint, the tokenized cache root), so that each writer asks the same
question rather than its own copy of it: `packed_problem` (nothing lands in a packed output
folder, at any depth: pq.read_table, datasets and every packtool reader take what is there for
its shards) and `input_problem` (nothing holds an input or lies inside an input folder: a later
read of that folder would take it for data)."""
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


STRAY = "where pq.read_table, datasets and every packtool reader would take it for a stray shard"


def packed_output_around(path: str, itself: bool = False) -> str | None:
    """The packed output folder (real path) that `path` lies in, at any depth, or, with
    `itself`, is; None when there is none. A folder is a packed output when it holds a
    manifest (manifest_name.manifest_file), the one mark every packtool reader goes by."""
    from packtool.manifest_name import manifest_file  # pyarrow.fs: not for importing relations
    d = real_path(path)
    if not itself:
        d = os.path.dirname(d)
    while True:
        if os.path.isdir(d) and manifest_file(d) is not None:
            return d
        up = os.path.dirname(d)
        if up == d:
            return None
        d = up


def packed_problem(path: str, itself: bool = False) -> str | None:
    """Why `path` may not be written (a packed output, with `itself`, or inside one), or None;
    the caller adds its fix."""
    d = packed_output_around(path, itself)
    if d is None:
        return None
    where = "is a packed output folder" if d == real_path(path) else f"is inside a packed output folder ({d})"
    return f"{where}, {STRAY}"


def input_problem(path: str, inputs: Iterable[str], holds: bool = True) -> str | None:
    """Why `path` may not be written, or None: it lies inside an input folder or is one (a
    later read of that folder would take what packtool put there for data) or, with `holds`
    (a folder packtool writes into), holds an input. An input that is the same file is the
    file writer's own refusal (files.check_new_file: "is the input")."""
    rp = real_path(path)
    for p in input_paths(inputs):
        ri = real_path(p)
        if holds and is_inside(ri, rp):
            return f"holds the input {p}"
        if os.path.isdir(ri) and is_inside(rp, ri):
            return f"is inside the input folder {p} (a later read of it would take it for data)"
    return None


def check_relations(output: str, inputs: Iterable[str] = (), cache_dir: str | None = None,
                    shown: str | None = None) -> None:
    """Refuse an --output that is or holds the working directory, holds an input or lies
    inside an input folder, lies inside a packed output (one that is itself a packed output is
    replaced under --overwrite: folder.check_output), or holds or lies inside the tokenized
    cache (whose clean-up and reuse would meet the slabs), in one line each."""
    out, output = real_path(output), shown or output
    cwd = real_path(os.getcwd())
    if is_inside(cwd, out):
        what = "the working directory" if out == cwd else f"the working directory {cwd}"
        raise PacktoolOutputError(f"is {what} or holds it; give a new folder, e.g. "
                                  f"{arg('output', 'packed/')}", path=output, flag=cli_flag("output"))
    problem = input_problem(out, inputs) or packed_problem(out)
    if problem:
        raise PacktoolOutputError(f"{problem}; give another {arg('output')}, a new folder outside the "
                                  f"inputs and any packed output", path=output, flag=cli_flag("output"))
    if cache_dir and is_inside(real_path(cache_dir), out):
        raise PacktoolOutputError(f"holds the tokenized cache {cache_dir}; give another {arg('output')} "
                                  f"(or {arg('cache_dir')})", path=output, flag=cli_flag("output"))
    if cache_dir and is_inside(out, real_path(cache_dir)):
        raise PacktoolOutputError(f"is inside the tokenized cache folder {cache_dir} (its clean-up "
                                  f"and reuse are packtool's, not a place for slabs); give an "
                                  f"{arg('output')} outside it (or another {arg('cache_dir')})", path=output,
                                  flag=cli_flag("output"))


__all__ = ["STRAY", "check_relations", "input_paths", "input_problem", "is_inside", "packed_output_around",
           "packed_problem", "real_path"]
