"""Who may write where: the `pack` output folder, its lock and the temporary folders beside
it (packtool.output's stage half; the file primitives are packtool.output.files).

packtool writes only into a folder that is new, empty, or a previous packtool output holding
nothing but its own manifest and shards; `--overwrite` replaces only such an output, and a
shard is packtool's only when its name follows the shard naming rule and its size and
checksum are the manifest's. The path is resolved once (`~`, `./out/./`, a link followed
once, a dangling link refused), checked before any work, and that path is used to the end.
A lock file beside the output (`.<name>.packtool.lock`, fcntl; see output.lock.take) is held
for the whole run, so a second writer fails at once. Temporary and spill folders carry the
owner's marker (output.leftovers); a later run removes those it proves a dead run's (and
restores a previous output a kill left half-swapped, marked before it was set aside). SIGTERM is turned into an exit that runs the same clean-up as
Ctrl-C; parent folders a failed run created go too. Nothing packtool did not write is deleted.
"""
from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from typing import Iterable, Iterator

from packtool.errors import PacktoolInputError, PacktoolOutputError, arg, cli_flag, missing
from packtool.output.files import (
    SPILL_TAG,
    TMP_TAG,
    is_mount_point,
    make_temp_dir,
    nearest_existing,
    refused,
    resolve,
    resolve_folder,
)
from packtool.output.lock import Held, lock_file, release, take
from packtool.output.leftovers import MARKER, mark, owned_temp_dir, unmark
from packtool.output.owned import owned_names, remove_previous, say
from packtool.output.relations import check_relations, packed_problem
from packtool.output.stale import clean_stale
# the cache root's check is the tokenize stage's (tokenize_to_cache runs it too); named here
# beside --output's for pack, the Ray engine and the CLI
from packtool.tokenize.cache_root import check_cache_dir



class OutputExistsError(PacktoolOutputError, FileExistsError):
    """A previous packtool output is at --output and --overwrite was not given."""


class Terminated(SystemExit):
    """SIGTERM during a pack: unwinds like Ctrl-C (temporary folders go), exit status 143."""

    def __init__(self) -> None:
        super().__init__(128 + signal.SIGTERM)


# --- checks -----------------------------------------------------------------------------

def _output_required() -> PacktoolInputError:
    return missing(PacktoolInputError, "output", f"{arg('output')} is required (or use {arg('dry_run', True)})")


def check_output(output: str | None, overwrite: bool = False, dry_run: bool = False,
                 inputs: Iterable[str] = (), cache_dir: str | None = None) -> list[str]:
    """Refuse, before any work, an --output packtool must not write to; return the names of a
    previous output that the new one will replace (empty for a new or empty folder). A dry run
    with an --output is refused as the real run would be (it previews that run); one without
    needs none."""
    if not output:
        if dry_run:
            return []
        raise _output_required()
    from packtool.storage import utf8_path
    if not utf8_path(output):  # before any work: the shards' Parquet writer cannot open a file there
        raise PacktoolOutputError(f"is not valid UTF-8 (a name in another locale's bytes), under which the Parquet "
                                  f"writer cannot create the shards; pick another {arg('output')}", path=output,
                                  flag=cli_flag("output"))
    out = resolve_folder(output)
    check_relations(out, inputs, cache_dir, shown=output)
    if os.path.lexists(out) and not os.path.isdir(out):
        raise PacktoolOutputError(f"exists and is not a folder; pick another {arg('output')}", path=output,
                                  flag=cli_flag("output"))
    base = nearest_existing(os.path.dirname(out))
    if not os.path.isdir(base):
        raise PacktoolOutputError(f"cannot be created: {base} is not a folder", path=output,
                                  flag=cli_flag("output"))
    if not os.access(base, os.W_OK | os.X_OK):
        raise PacktoolOutputError(f"cannot be written: {base} is read-only or not yours; pick "
                                  f"another {arg('output')}", path=output, flag=cli_flag("output"))
    if not os.path.isdir(out):
        return []
    if is_mount_point(out):  # refused before the work: the swap (two renames) would fail after it
        raise PacktoolOutputError(
            f"is a mount point (a container volume, a tmpfs), and packtool puts an output in place by renaming a "
            f"finished folder onto its name, which a mount point cannot take; give a folder inside it: "
            f"{arg('output')} {os.path.join(output, 'packed')}", path=output, flag=cli_flag("output"))
    names = owned_names(out)
    if names and names != [MARKER] and not overwrite:  # a marker alone: a dead run's (claim_output drops it)
        raise OutputExistsError(f"exists (a previous packtool output): pass {arg('overwrite', True)} to "
                                f"replace it", path=output, flag=cli_flag("output"))
    return names


# --- the claim: lock, stale clean-up, SIGTERM -------------------------------------------

_HELD: dict[str, Held] = {}
_HELD_LOCK = threading.Lock()


def lock_path(output: str) -> str:
    return lock_file(resolve_folder(output))


def _take_lock(output: str, shown: str) -> Held:
    return take(resolve_folder(output), shown, "output", "pack", "output")


@contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum, frame):
        raise Terminated()

    if getattr(signal.getsignal(signal.SIGTERM), "packtool_unwinds", False):
        yield  # the console script's: SIGTERM unwinds as its Ctrl-C does, one line, exit 143
        return
    try:
        prev = signal.signal(signal.SIGTERM, on_term)
    except ValueError:  # not the main interpreter
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, prev)


@contextmanager
def claim_output(output: str | None, overwrite: bool = False, dry_run: bool = False,
                 inputs: Iterable[str] = (), cache_dir: str | None = None,
                 cache_root: str | None = None) -> Iterator[str | None]:
    """Check `output` (see `check_output`), lock it for the block, clean up after dead runs
    and let SIGTERM unwind like Ctrl-C. Yields the resolved output path, the one the block
    must write (None for a dry run, whose --output is checked alone: nothing is locked, cleaned or
    written). Re-entrant within a process (pack -> pack_cache)."""
    if dry_run:
        check_output(output, overwrite, dry_run, inputs, cache_dir)
        with _sigterm_unwinds():
            yield None
        return
    if not output:
        raise _output_required()
    key = resolve_folder(output)
    with _HELD_LOCK:
        held = _HELD.get(key)
        if held is not None:
            held.count += 1
    if held is not None:
        try:
            yield key
        finally:
            with _HELD_LOCK:
                held.count -= 1
        return
    check_output(output, overwrite, dry_run, inputs, cache_dir)
    held = _take_lock(key, output)
    with _HELD_LOCK:
        _HELD[key] = held
    failed = True
    try:
        clean_stale(key, cache_root or cache_dir)
        check_output(key, overwrite, dry_run, inputs, cache_dir)  # a run may have just ended
        with _sigterm_unwinds():
            yield key
        failed = False
    except Terminated:
        say(f"terminated (SIGTERM): this run's temporary files are removed; {_after_swap_note(key, output)}")
        raise
    finally:
        with _HELD_LOCK:
            _HELD.pop(key, None)
        release(held, failed and not os.path.lexists(key))


# --- temporary folders and the swap -----------------------------------------------------

def _beside(output: str, tag: str) -> tuple[str, str]:
    out = resolve_folder(output)
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    return parent, f".{os.path.basename(out)}.{tag}-{os.getpid()}-"


def temp_dir(output: str) -> str:
    """A fresh folder the new output is written into, beside `output` (same file system)."""
    parent, prefix = _beside(output, TMP_TAG)
    d = make_temp_dir(parent, prefix)
    mark(d, made=True)  # the next run's sweep removes it only on this proof (output.leftovers)
    return d


def spill_dir(output: str | None) -> str:
    """A fresh folder for the plan's spill: beside the output, else in the system's temp."""
    if not output:
        return owned_temp_dir(f"packtool-spill-{os.getpid()}-")
    parent, prefix = _beside(output, SPILL_TAG)
    return owned_temp_dir(prefix, parent)


_SWAPPED: list[str] = []  # outputs this process put in place: never called "as it was" after that


def swapped_outputs() -> list[str]:
    """The outputs this process has replaced (or created) so far, in order (resolved paths):
    what an interruption after the swap must name as new rather than as left alone."""
    return list(_SWAPPED)


def _after_swap_note(key: str, shown: str | None) -> str:
    if key in _SWAPPED:
        return f"{shown} was already complete and in place (the new output; any previous one is replaced)"
    return f"{shown} is as it was"


def swap_into_place(tmp: str, output: str) -> None:
    """The old output stays whole until the new one is complete; then two renames, with
    SIGINT and SIGTERM held back so that neither lands between them. The replaced output is
    re-checked first: files that appeared in it since the start stop the swap.

    A SIGKILL can still land between any two steps, so every folder a step leaves under a
    name the next run's sweep looks at carries a marker (output.leftovers) before it gets that
    name: the previous output is marked in place before it is set aside as `.old`, the new one
    is renamed with its marker and unmarked only under its final name. A kill between two
    steps leaves a marked `.old` (put back, or removed once the new output is in place), the
    marked temporary (removed), or an output holding a dead run's marker (the marker removed:
    stale.clean_stale)."""
    out = resolve_folder(output)
    main = threading.current_thread() is threading.main_thread()
    held = {signal.SIGINT, signal.SIGTERM}
    if main:
        signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        if os.path.exists(out):
            names = owned_names(out)  # its shards checked again: unchanged since they were hashed
            old = tmp + ".old"
            _mark_in_place(out)
            try:
                os.replace(out, old)
            except OSError as e:  # the previous output as it was, without this run's marker in it
                unmark(out)
                raise PacktoolOutputError(f"cannot be set aside to put the new output in place ({e.strerror}); it "
                                          f"is as it was; give another {arg('output')}", path=output,
                                          flag=cli_flag("output")) from None
            os.replace(tmp, out)
            _SWAPPED.append(out)
            unmark(out)  # the output is the user's once in place, not a leftover
            remove_previous(old, names=names)
        else:
            os.replace(tmp, out)
            _SWAPPED.append(out)
            unmark(out)
    finally:
        if main:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, held)


def _mark_in_place(out: str) -> None:
    """Mark the previous output before it is set aside (a marker a dead run left in it, which
    owned_names counts as packtool's, is replaced by this run's). A folder packtool may rename
    but not write into keeps no marker: a kill from here leaves its `.old` named, never deleted."""
    unmark(out)
    try:
        mark(out)
    except OSError:
        pass


__all__ = ["check_cache_dir", "OutputExistsError", "Terminated", "check_output", "claim_output", "clean_stale",
           "lock_path", "owned_names", "say", "spill_dir", "swap_into_place",
           "swapped_outputs", "temp_dir"]
