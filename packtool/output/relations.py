"""Where an --output may not be relative to the other paths of a run
(packtool.output's first checks): not the working directory or above it, not holding or
inside an input, not holding or inside the tokenized cache (folder.check_cache_dir: where the
cache may not be). Paths are compared as real paths (links resolved).

Two rules here hold for everything packtool writes (a pack output folder, a file such as a
plan, report, log or checkpoint, the tokenized cache root), so that each writer asks the same
question rather than its own copy of it: `packed_problem` (nothing lands inside a tree packtool
owns, at any depth: a packed output, whose readers take what is there for shards; a tokenized
cache entry, deleted whole when found damaged; a temporary, spill or staging folder, removed
when its run ends or by the next run's sweep; a `train --save` checkpoint folder, which holds
checkpoint files only: `own_tree_around` knows each by what packtool leaves in it, a
checkpoint folder by a checkpoint's contents, never by a file's name) and
`input_problem` (nothing holds an input or lies inside an input folder: a later read of that
folder would take it for data)."""
from __future__ import annotations

import os
from typing import Iterable

from packtool.checkpoint_kind import is_checkpoint_folder
from packtool.errors import PacktoolOutputError, arg, cli_flag
from packtool.params import expanded
from packtool.storage import local_glob


def real_path(p: str) -> str:
    return os.path.realpath(os.path.abspath(expanded(p, error=PacktoolOutputError)))


def is_inside(child: str, parent: str) -> bool:
    """child == parent or child below parent (both real paths)."""
    return child == parent or child.startswith(parent.rstrip(os.sep) + os.sep)


def input_paths(inputs: Iterable[str]) -> list[str]:
    out = []
    for s in inputs:
        if not s:
            continue
        s = expanded(str(s))
        out += [s] if os.path.exists(s) else (local_glob(s) or [s])
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


# How each of packtool's own trees is known, by what packtool itself leaves in it, and why
# nothing else may be written there (the writer adds its fix)
CACHE_PARTS = ("data", "flat")  # tokenize.cache_parts.DATA_DIR and the flat store (cache.FLAT_DIR)
WHY = {
    "packed": ("a packed output folder", STRAY),
    "cache": ("a tokenized cache entry", "which packtool deletes whole when it finds it damaged"),
    "temporary": ("a packtool temporary folder", "which packtool removes when its run ends (or the next run does)"),
    "checkpoint": ("a train --save checkpoint folder", "which holds packtool's checkpoint files only"),
}


def is_cache_entry(folder: str) -> bool:
    """A tokenized cache entry (tokenize/cache.py's layout: `cache.json` beside its `data/`
    parts or `flat/` store), complete, damaged or set aside: the structure, not cache.json's
    content (a damaged entry is packtool's too). tokenize.cache_root asks this one rule."""
    return os.path.isfile(os.path.join(folder, "cache.json")) and any(
        os.path.isdir(os.path.join(folder, d)) for d in CACHE_PARTS)


def own_tree_kind(folder: str) -> str | None:
    """Which of packtool's own trees `folder` is (a key of WHY), or None."""
    from packtool.manifest_name import manifest_file  # pyarrow.fs: not for importing relations
    from packtool.output.leftovers import MARKER
    if not os.path.isdir(folder):
        return None
    if manifest_file(folder) is not None:
        return "packed"
    if is_cache_entry(folder):
        return "cache"
    if os.path.isfile(os.path.join(folder, MARKER)):
        return "temporary"
    # by its contents (checkpoint_kind, megatron.checkpoint's rule): a user's own mp_rank_00.pt
    # does not make the folder packtool's
    return "checkpoint" if is_checkpoint_folder(folder) else None


def own_tree_around(path: str, itself: bool = False, mine: str | None = None,
                    kinds: tuple[str, ...] | None = None) -> tuple[str, str] | None:
    """(real path, kind) of the innermost of packtool's own trees `path` lies in, at any depth,
    or, with `itself`, is; None when there is none. `mine`: the kind of tree the writer itself
    writes into, allowed as `path`'s own folder (train --save's files in its checkpoint folder);
    `kinds`: only those (a tree's own file, see files.check_new_file: only a packed output)."""
    d = real_path(path)
    if not itself:
        d = os.path.dirname(d)
    first = d
    while True:
        kind = own_tree_kind(d)
        if kind is not None and not (kind == mine and d == first) and (kinds is None or kind in kinds):
            return d, kind
        up = os.path.dirname(d)
        if up == d:
            return None
        d = up


def packed_problem(path: str, itself: bool = False, mine: str | None = None,
                   kinds: tuple[str, ...] | None = None, role: str | None = None) -> str | None:
    """Why `path` may not be written (one of packtool's own trees, with `itself`, or inside one:
    `own_tree_around`), or None; the caller adds its fix. Said as what `path` is: the tree
    itself given as something else (`role`: "a cache root"), the output's own manifest or an
    existing file of it (replacing it destroys the output), or a new file inside (a stray shard
    to every reader); "a stray shard" was said of all three."""
    found = own_tree_around(path, itself, mine, kinds)
    if found is None:
        return None
    d, kind = found
    what, why = WHY[kind]
    rp = real_path(path)
    if d == rp:
        return f"is {what}, not {role}" if role else f"is {what}, {why}"
    if kind == "packed" and os.path.dirname(rp) == d and os.path.isfile(rp):
        from packtool.manifest_name import manifest_file  # pyarrow.fs: not for importing relations
        own = "the manifest" if rp == real_path(manifest_file(d) or "") else "a file"
        return f"is {own} of the packed output {d} (replacing it would destroy that output)"
    return f"is inside {what} ({d}), {why}"


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


__all__ = ["CACHE_PARTS", "STRAY", "WHY", "check_relations", "is_cache_entry", "own_tree_around",
           "own_tree_kind", "input_paths", "input_problem", "is_inside", "packed_output_around",
           "packed_problem", "real_path"]
