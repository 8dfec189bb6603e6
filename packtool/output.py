"""Who may write where: the `pack` output path, its lock and the temporary folders beside it.

packtool writes only into a folder that is new, empty, or a previous packtool output (its
manifest says so) holding nothing but its own manifest and shards; `--overwrite` replaces
only such an output. The checks run before any work. A lock file beside the output
(`.<name>.packtool.lock`, fcntl) is held for the whole run, so a second writer fails at once.
Temporary and spill folders carry the owner's pid; a later run removes those whose process
is dead (and restores a previous output a kill left half-swapped). SIGTERM is turned into
an exit that runs the same clean-up as Ctrl-C. Nothing packtool did not write is deleted.
Where --output may not lie relative to the inputs, the working directory and the tokenized
cache: packtool.output_relations.
"""
from __future__ import annotations

import errno
import fcntl
import os
import re
import shutil
import signal
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterable, Iterator

from packtool.errors import PacktoolInputError, PacktoolOutputError
from packtool.output_relations import check_relations, real_path
from packtool.slabs.format import LEGACY_MANIFEST, MANIFEST, FormatError, manifest_file, read_manifest, shard_names

_MANIFESTS = (MANIFEST, LEGACY_MANIFEST)

TMP_TAG = "packtool-tmp"
SPILL_TAG = "packtool-spill"
SHOWN_FOREIGN = 3


class OutputExistsError(PacktoolOutputError, FileExistsError):
    """A previous packtool output is at --output and --overwrite was not given."""


class Terminated(SystemExit):
    """SIGTERM during a pack: unwinds like Ctrl-C (temporary folders go), exit status 143."""

    def __init__(self) -> None:
        super().__init__(128 + signal.SIGTERM)


def say(line: str) -> None:
    """One notice line for the user, on stderr (stdout stays for --json)."""
    print(f"packtool: {line}", file=sys.stderr, flush=True)


# --- checks -----------------------------------------------------------------------------

_real = real_path


def owned_names(output: str) -> list[str]:
    """The entries of an existing output folder packtool may replace: its manifest and the
    shards the manifest lists. Anything else there makes it not packtool's to replace."""
    try:
        entries = sorted(os.listdir(output))
    except OSError as e:
        raise PacktoolOutputError(f"cannot list it ({e.strerror})", path=output) from None
    if not entries:
        return []
    try:
        m = read_manifest(output)
        names = shard_names(m, manifest_file(output) or output)
    except FormatError:
        return _refuse_foreign(output, entries, "it is not a packtool output (no readable manifest)")
    foreign = [e for e in entries if e not in _MANIFESTS and e not in set(names)]
    if foreign:
        return _refuse_foreign(output, foreign, "a packtool output, but it also holds")
    return [e for e in entries if e in _MANIFESTS or e in set(names)]


def _refuse_foreign(output: str, foreign: list[str], why: str) -> list[str]:
    shown = ", ".join(foreign[:SHOWN_FOREIGN]) + (f" and {len(foreign) - SHOWN_FOREIGN} more"
                                                  if len(foreign) > SHOWN_FOREIGN else "")
    raise PacktoolOutputError(f"{why}: {shown}; packtool writes only into a new or empty folder "
                              f"or its own previous output: pick another --output", path=output)


def _nearest_existing(path: str) -> str:
    p = path
    while not os.path.lexists(p):
        up = os.path.dirname(p)
        if up == p:
            break
        p = up
    return p


def check_output(output: str | None, overwrite: bool = False, dry_run: bool = False,
                 inputs: Iterable[str] = (), cache_dir: str | None = None) -> list[str]:
    """Refuse, before any work, an --output packtool must not write to; return the names of a
    previous output that the new one will replace (empty for a new or empty folder)."""
    if dry_run:
        return []
    if not output:
        raise PacktoolInputError("--output is required (or use --dry-run)")
    check_relations(output, inputs, cache_dir)
    out = _real(output)
    if os.path.lexists(out) and not os.path.isdir(out):
        raise PacktoolOutputError("exists and is not a folder; pick another --output", path=output)
    base = _nearest_existing(os.path.dirname(out))
    if not os.path.isdir(base):
        raise PacktoolOutputError(f"cannot be created: {base} is not a folder", path=output)
    if not os.access(base, os.W_OK | os.X_OK):
        raise PacktoolOutputError(f"cannot be written: {base} is read-only or not yours; pick "
                                  f"another --output", path=output)
    if not os.path.isdir(out):
        return []
    names = owned_names(out)
    if names and not overwrite:
        raise OutputExistsError("exists (a previous packtool output): pass --overwrite to "
                                "replace it", path=output)
    return names


# --- the claim: lock, stale clean-up, SIGTERM -------------------------------------------

@dataclass
class _Held:
    fd: int
    lock_path: str
    count: int


_HELD: dict[str, _Held] = {}
_HELD_LOCK = threading.Lock()


def lock_path(output: str) -> str:
    out = _real(output)
    return os.path.join(os.path.dirname(out), f".{os.path.basename(out)}.packtool.lock")


def _take_lock(output: str) -> _Held:
    path = lock_path(output)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise PacktoolOutputError(f"cannot be written: {e.strerror} ({os.path.dirname(path)}); "
                                  f"pick another --output", path=output) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            os.close(fd)
            raise
        try:
            owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        finally:
            os.close(fd)
        raise PacktoolOutputError(f"another packtool pack (pid {owner}) is writing this output; "
                                  f"wait for it to finish or pick another --output",
                                  path=output) from None
    try:
        same = os.stat(path).st_ino == os.fstat(fd).st_ino  # not unlinked by a finishing run
    except FileNotFoundError:
        same = False
    if not same:
        os.close(fd)
        return _take_lock(output)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return _Held(fd, path, 1)


def _release(h: _Held) -> None:
    try:
        os.unlink(h.lock_path)  # while still locked: a waiting run re-checks the inode
    except OSError:
        pass
    os.close(h.fd)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stale_pattern(output: str) -> re.Pattern:
    name = re.escape(os.path.basename(_real(output)))
    return re.compile(rf"^\.{name}\.(?:{TMP_TAG}|{SPILL_TAG})-(\d+)(?:-[^/]*)?(\.old)?$")


def clean_stale(output: str, cache_root: str | None = None) -> int:
    """Remove what dead runs left: temporary/spill folders named by packtool for `output`, and
    cache build folders in `cache_root`, whose owner process is gone. A previous output that a
    kill left set aside mid-swap is put back. Says what it did in one line; returns the count."""
    out = _real(output)
    parent = os.path.dirname(out)
    pat, removed, restored = _stale_pattern(output), 0, False
    try:
        entries = os.listdir(parent)
    except OSError:
        entries = []
    for e in sorted(entries):
        m = pat.match(e)
        if not m or _pid_alive(int(m.group(1))):
            continue
        path = os.path.join(parent, e)
        if m.group(2):  # `.old`: the previous output, set aside by a swap that did not finish
            if not os.path.lexists(out) and manifest_file(path):
                os.replace(path, out)
                restored = True
                continue
            removed += _remove_previous(path, quiet=True)
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed += 1
    removed += _clean_cache(cache_root)
    if restored:
        say(f"restored {output}: a run killed while replacing it had set it aside")
    if removed:
        say(f"removed {removed} temporary folder(s) left by packtool runs that were killed "
            f"(beside {output} or in the cache)")
    return removed


_CACHE_TMP = re.compile(r"^\.tmp-[0-9a-f]+-(\d+)-")
_CACHE_ASIDE = re.compile(r"^[0-9a-f]+\.damaged-(\d+)$")  # tokenize.pipeline.discard_cache
_FLAT_TMP = re.compile(r"^flat\.tmp-(\d+)$")


def _clean_cache(root: str | None) -> int:
    if not root or not os.path.isdir(root):
        return 0
    n = 0
    for e in os.listdir(root):
        path = os.path.join(root, e)
        m = _CACHE_TMP.match(e) or _CACHE_ASIDE.match(e)
        if m and not _pid_alive(int(m.group(1))):
            shutil.rmtree(path, ignore_errors=True)
            n += 1
            continue
        if os.path.isdir(path) and not e.startswith("."):
            try:
                inner = os.listdir(path)
            except OSError:
                continue
            for f in inner:
                m = _FLAT_TMP.match(f)
                if m and not _pid_alive(int(m.group(1))):
                    shutil.rmtree(os.path.join(path, f), ignore_errors=True)
                    n += 1
    return n


def _remove_previous(old: str, quiet: bool = False) -> int:
    """Delete a replaced output: only its manifest and listed shards, then the folder if that
    left it empty (a file someone added since is kept, and said)."""
    try:
        names = shard_names(read_manifest(old))
    except FormatError:
        names = []
    for n in (*names, *_MANIFESTS):
        try:
            os.unlink(os.path.join(old, n))
        except FileNotFoundError:
            pass
    try:
        os.rmdir(old)
    except OSError:
        if not quiet:
            say(f"kept {old}: it holds files packtool did not write")
        return 0
    return 1


@contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum, frame):
        raise Terminated()

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
                 cache_root: str | None = None) -> Iterator[None]:
    """Check `output` (see `check_output`), lock it for the block, clean up after dead runs and
    let SIGTERM unwind like Ctrl-C. Re-entrant within a process (pack -> pack_cache)."""
    if dry_run:
        with _sigterm_unwinds():
            yield
        return
    key = _real(output) if output else ""
    with _HELD_LOCK:
        held = _HELD.get(key)
        if held is not None:
            held.count += 1
    if held is not None:
        try:
            yield
        finally:
            with _HELD_LOCK:
                held.count -= 1
        return
    check_output(output, overwrite, dry_run, inputs, cache_dir)
    held = _take_lock(output)
    with _HELD_LOCK:
        _HELD[key] = held
    try:
        clean_stale(output, cache_root or cache_dir)
        check_output(output, overwrite, dry_run, inputs, cache_dir)  # a run may have just ended
        with _sigterm_unwinds():
            yield
    except Terminated:
        say(f"terminated (SIGTERM): this run's temporary files are removed; {_after_swap_note(output)}")
        raise
    finally:
        with _HELD_LOCK:
            _HELD.pop(key, None)
        _release(held)


# --- temporary folders and the swap -----------------------------------------------------

def _beside(output: str, tag: str) -> str:
    out = _real(output)
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    return os.path.join(parent, f".{os.path.basename(out)}.{tag}-{os.getpid()}")


def temp_dir(output: str) -> str:
    """The folder the new output is written into, beside `output` (same file system)."""
    tmp = _beside(output, TMP_TAG)
    shutil.rmtree(tmp, ignore_errors=True)  # ours: this pid, from an earlier call that failed
    os.makedirs(tmp)
    return tmp


def spill_dir(output: str | None) -> str:
    """A fresh folder for the plan's spill: beside the output, else in the system's temp."""
    import tempfile
    if not output:
        return tempfile.mkdtemp(prefix=f"packtool-spill-{os.getpid()}-")
    base = _beside(output, SPILL_TAG)
    return tempfile.mkdtemp(prefix=os.path.basename(base) + "-", dir=os.path.dirname(base))


_SWAPPED: list[str] = []  # outputs this process put in place: never called "as it was" after that


def swapped_outputs() -> list[str]:
    """The outputs this process has replaced (or created) so far, in order: what an
    interruption after the swap must name as new rather than as left alone."""
    return list(_SWAPPED)


def _after_swap_note(output: str | None) -> str:
    if output and output in _SWAPPED:
        return f"{output} was already complete and in place (the new output; any previous one is replaced)"
    return f"{output} is as it was"


def swap_into_place(tmp: str, output: str) -> None:
    """The old output stays whole until the new one is complete; then two renames, with
    SIGINT and SIGTERM held back so that neither lands between them. The replaced output is
    re-checked first: files that appeared in it since the start stop the swap."""
    main = threading.current_thread() is threading.main_thread()
    held = {signal.SIGINT, signal.SIGTERM}
    if main:
        signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        if os.path.exists(output):
            owned_names(output)
            old = tmp + ".old"
            os.replace(output, old)
            os.replace(tmp, output)
            _SWAPPED.append(output)
            _remove_previous(old)
        else:
            os.replace(tmp, output)
            _SWAPPED.append(output)
    finally:
        if main:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, held)


__all__ = ["OutputExistsError", "Terminated", "check_output", "claim_output", "clean_stale",
           "lock_path", "owned_names", "spill_dir", "swap_into_place", "swapped_outputs", "temp_dir"]
