"""What dead runs left, removed by the next run (packtool.output's stage half, with folder.py):
temporary and spill folders beside an output, a previous output set aside mid-swap (put
back), the cache's build, set-aside, pull and `verify --source` folders, and the system temp
folder's staging and spill folders. Found by name, removed only on proof (output.leftovers:
the marker packtool wrote in them, a dead process of this machine, only packtool's names; an
empty one without a marker goes by rmdir alone when the pid in its name is gone). A published
output or cache entry that still holds a dead run's marker (a kill between its rename and the
marker's removal) loses the marker, and nothing else."""
from __future__ import annotations

import os
import re

from packtool.pids import plausible_pid
from packtool.output.files import SPILL_TAG, TMP_TAG, resolve_folder, temp_target
from packtool.output.entry_files import FLAT_TMP, FLAT_NAMES, entry_names
from packtool.output.leftovers import Sweep, drop_dead_record, remove_tree, unmark
from packtool.output.owned import say
from packtool.slabs.names import is_output_file, is_partial_shard_name, manifest_file


# what packtool writes at the top of each kind of temporary folder (anything else: not proof)
def output_names(name: str) -> bool:
    """An output folder's files (slabs.names: shards of either form, the manifest), a shard
    still being written, or a file's `write_file` temporary (the manifest's)."""
    return is_output_file(name) or is_partial_shard_name(name) or is_output_file(temp_target(name) or "")


# every recognizer below ends in \Z: `$` also matches before a final newline ("data\n" is no entry)
SPILL_NAMES = re.compile(r"^(?:plan\.pkl|(?:spec|routed|placement)-\d+\.(?:pkl|bin|npy)|offsets\.npy)\Z").match
CACHE_ROOT_NAMES = re.compile(r"^(?:[0-9a-f]{8,}|\.(?:tmp|pull)-[0-9a-f]*-\d+-.*)\Z").match  # verify's own cache


# A folder in the exact form packtool's mkdtemp gives (its tag, its pid, mkdtemp's 8 random
# characters; a damaged cache entry's set-aside name): only such a name's pid lets an EMPTY one
# without a marker go (output.leftovers.judge). A user's `packtool-results-1-x` stays.
_MADE = re.compile(r"(?:(?:^packtool-(?:tmp|spill|part|shard)|\.packtool-(?:tmp|spill)|^\.tmp-[0-9a-f]{1,12}"
                   r"|^\.pull-[0-9a-f]{0,12}|^\.verify-source|^flat\.tmp)-(\d+)-[a-z0-9_]{8}(?:\.old)?"
                   r"|^[0-9a-f]+\.damaged-(\d+))\Z")


def made_pid(name: str) -> int | None:
    """The pid in `name` when it is exactly a temporary folder's name as packtool makes it."""
    m = _MADE.search(name)
    pid = int(m.group(1) or m.group(2)) if m else None
    return pid if plausible_pid(pid) else None  # a pid no process has: not a name packtool gave


def _stale_pattern(out: str) -> re.Pattern:
    name = re.escape(os.path.basename(out))
    return re.compile(rf"^\.{name}\.(?:({TMP_TAG})|{SPILL_TAG})-(\d+)(?:-[^/]*?)?(\.old)?\Z")


def clean_stale(output: str, cache_root: str | None = None) -> int:
    """Remove what dead runs left: temporary/spill folders named by packtool for `output`, and
    cache build folders in `cache_root`, that packtool proves its own. A previous output that a
    kill left set aside mid-swap is put back. Names what it removed and what it left; returns
    the count removed."""
    out = resolve_folder(output)
    parent = os.path.dirname(out)
    pat, sweep, restored = _stale_pattern(out), Sweep(), []
    drop_dead_record(out)
    try:
        entries = os.listdir(parent)
    except OSError:
        entries = []
    for e in sorted(entries):
        m = pat.match(e)
        if not m:
            continue
        path, pid = os.path.join(parent, e), made_pid(e)
        if m.group(3):  # `.old`: the previous output, set aside by a swap that did not finish
            sweep.consider(path, output_names, lambda p: _put_back(p, out, restored), pid=pid)
        else:
            sweep.consider(path, output_names if m.group(1) else SPILL_NAMES, pid=pid)
    sweep_cache(cache_root, sweep)
    sweep_system_temp(sweep)
    if restored:
        say(f"restored {output}: a run killed while replacing it had set it aside")
    return sweep.report()


def _put_back(old: str, out: str, restored: list[str]) -> bool:
    """A set-aside output proven a dead swap's (its marker, folder.swap_into_place): put back
    when nothing took its place (moved with its marker, which comes out only in place: a kill
    between leaves the output with a dead run's marker, dropped by the next clean_stale), else
    removed whole (the proof covers every name in it; a kill mid-removal of the swap left it
    without its manifest). True when removed."""
    if not os.path.lexists(out) and manifest_file(old):
        os.replace(old, out)
        unmark(out)
        restored.append(out)
        return False
    remove_tree(old)
    return True


# output.store.staging_dir / scratch and output.folder.spill_dir without an output folder: the
# system's temp folder, since an object-store output has no folder beside it
_SYSTEM_TMP = re.compile(r"^packtool-([a-z]+)-\d+-")
# by tag: a plan's spill, a Ray cache build's part (engines.ray_cache: a cache entry's data/);
# the rest (tmp, shard) stage an output's shards
_SYSTEM_NAMES = {"spill": SPILL_NAMES, "part": entry_names}


def sweep_system_temp(sweep: Sweep) -> None:
    """The staging and spill folders of dead runs in the system's temp folder (a store
    output's shards were staged there: GBs per killed run)."""
    import tempfile
    root = tempfile.gettempdir()
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return
    for e in entries:
        m = _SYSTEM_TMP.match(e)
        if m:
            sweep.consider(os.path.join(root, e), _SYSTEM_NAMES.get(m.group(1), output_names), pid=made_pid(e))


def clean_system_temp() -> int:
    """`sweep_system_temp` on its own, said; the count removed."""
    sweep = Sweep()
    sweep_system_temp(sweep)
    return sweep.report()


_CACHE_TMP = re.compile(r"^\.tmp-[0-9a-f]+-\d+-")  # tokenize.pipeline, engines.ray_cache
_CACHE_ASIDE = re.compile(r"^[0-9a-f]+\.damaged-\d+\Z")  # tokenize.request.discard_cache
_VERIFY_TMP = re.compile(r"^\.verify-source-\d+-")  # verification.source
_PULL_TMP = re.compile(r"^\.pull-[0-9a-f]*-\d+-")  # tokenize.store_cache: an entry being pulled
_FLAT_DIR = "flat"  # tokenize.cache_entry.FLAT_DIR: an entry's flat store, published by a rename too


def sweep_cache(root: str | None, sweep: Sweep) -> None:
    if not root or not os.path.isdir(root):
        return
    for e in sorted(os.listdir(root)):
        path = os.path.join(root, e)
        if _VERIFY_TMP.match(e):
            sweep.consider(path, CACHE_ROOT_NAMES, pid=made_pid(e))
            continue
        if _CACHE_TMP.match(e) or _CACHE_ASIDE.match(e) or _PULL_TMP.match(e):
            sweep.consider(path, entry_names, pid=made_pid(e))
            continue
        if os.path.isdir(path) and not os.path.islink(path) and not e.startswith("."):
            _sweep_entry(path, sweep)


def _sweep_entry(path: str, sweep: Sweep) -> None:
    """A published entry: a dead run's marker left in it or its flat store, and the flat
    store's build folders."""
    for d in (path, os.path.join(path, _FLAT_DIR)):
        if os.path.isdir(d) and not os.path.islink(d):
            drop_dead_record(d)
    try:
        inner = sorted(os.listdir(path))
    except OSError:
        return
    for f in inner:
        if FLAT_TMP.match(f):
            sweep.consider(os.path.join(path, f), FLAT_NAMES, pid=made_pid(f))


def clean_cache(root: str | None) -> int:
    """`sweep_cache` on its own, said; the count removed."""
    sweep = Sweep()
    sweep_cache(root, sweep)
    return sweep.report()


__all__ = ["clean_cache", "clean_stale", "clean_system_temp", "sweep_cache", "sweep_system_temp"]
