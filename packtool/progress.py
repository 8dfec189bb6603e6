"""What a user sees on long work outside tokenizing: a progress bar on stderr for `verify` and
`inspect` on large outputs, and one line when the numba kernels are about to be compiled
(the first run on a machine; later runs load them from numba's cache)."""
from __future__ import annotations

import glob
import os
import sys
from contextlib import contextmanager
from typing import Callable, Iterator

# Below this many bytes of shards the work takes about a second: no bar.
PROGRESS_MIN_BYTES = 64 << 20

# Modules whose njit(cache=True) kernels `pack` compiles on its first run.
_KERNEL_MODULES = ("packers/_common.py", "packers/bfd.py", "packers/mffd.py", "packers/balanced.py",
                   "packers/dp.py", "slabs/writer.py", "slabs/gather.py", "tokenize/flat_tokens.py",
                   "tokenize/encode.py", "tokenize/cache.py")
_said: set[str] = set()


@contextmanager
def bar(label: str, total: int, unit: str, enabled: bool = True) -> Iterator[Callable[[int], None]]:
    """`advance(n)` for a transient rich bar on stderr; a no-op when not enabled."""
    if not enabled or total <= 0:
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
    p = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TextColumn(unit),
                 TimeRemainingColumn(), console=Console(stderr=True), transient=True)
    task = p.add_task(label, total=total)
    with p:
        yield lambda n: p.update(task, advance=n)


def large(paths: list[str]) -> bool:
    """Whether files this large are worth a progress bar."""
    total = 0
    for p in paths:
        try:
            total += os.path.getsize(p)
        except OSError:
            pass
    return total >= PROGRESS_MIN_BYTES


def kernels_cached() -> bool:
    """Whether numba's cache holds packtool's kernels (an index file per module)."""
    import numba
    root = os.path.dirname(os.path.abspath(__file__))
    extra = numba.config.CACHE_DIR or ""
    for rel in _KERNEL_MODULES:
        mod = os.path.splitext(os.path.basename(rel))[0]
        here = glob.glob(os.path.join(glob.escape(os.path.join(root, os.path.dirname(rel), "__pycache__")),
                                        f"{mod}.*.nbi"))
        if not here and not (extra and glob.glob(os.path.join(glob.escape(extra), "**", f"{mod}.*.nbi"),
                                                  recursive=True)):
            return False
    return True


def say_if_compiling(enabled: bool = True) -> None:
    """Say once per process that the first run compiles the kernels (it takes a while)."""
    if not enabled or "compile" in _said:
        return
    _said.add("compile")
    if not kernels_cached():
        print("packtool: first run on this machine: compiling the packing kernels (numba); "
              "later runs load them from the cache", file=sys.stderr, flush=True)


__all__ = ["PROGRESS_MIN_BYTES", "bar", "large", "kernels_cached", "say_if_compiling"]
