"""Issue 23 class 1: a kill between ANY two steps of a multi-step write leaves nothing that the
next run does not remove, and nothing of the user's is touched.

Every multi-step write packtool makes (the output swap over a previous output or into a new
folder, the sweep's own restore of a set-aside output, a file through `write_file` (plan -o,
inspect --html, train --save, the manifest, cache.json) new or replaced, a tokenized cache
entry published, pulled from a store, discarded, its flat store built, and every temporary
folder made and removed) runs in a forked child that `os._exit`s right before its Nth step,
for every N: a step is each call that makes, names, renames, links or removes something, or
puts on or takes off an owner record (the process boundary is the point: SIGKILL runs no
clean-up, no `finally`). The next run's sweep then runs here, and the folder must be exactly
as if the write had never started or had finished (files, bytes, packtool's records), the
user's file and a user's look-alike folder beside it included.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import time
import traceback

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from leftover_support import USER, dead_pid as _dead_pid, packed_output, tree, use_system_temp

from packtool.output.files import sweep_temps, write_file
from packtool.output.folder import spill_dir, swap_into_place, temp_dir
from packtool.output.leftovers import MARKER, owned_temp_dir, remove_tree
from packtool.output.stale import clean_cache, clean_stale
from packtool.slabs.names import MANIFEST, shard_file

KILLED = 77
HUNG_S = 120  # a guard against a hung child only: a writer here takes milliseconds
STEPS = ("mkdir", "open", "replace", "rename", "link", "unlink", "rmdir", "setxattr", "removexattr")


@pytest.fixture(scope="module")
def dead_pid() -> int:
    return _dead_pid()


# --- the kill: a forked child that stops dead before its Nth step --------------------------

def _creates(flags: int) -> bool:
    tmpfile = getattr(os, "O_TMPFILE", 0)
    return bool(flags & os.O_CREAT) or bool(tmpfile and flags & tmpfile == tmpfile)


def _hook(kill_at: int | None, seen: list[str]) -> None:
    """Count every step in this (child) process; die before step `kill_at`."""
    for name in STEPS:
        real = getattr(os, name)

        def step(*a, _real=real, _name=name, **k):
            if _name != "open" or _creates(a[1] if len(a) > 1 else k.get("flags", 0)):
                seen.append(_name)
                if kill_at is not None and len(seen) == kill_at:
                    os._exit(KILLED)
            return _real(*a, **k)
        setattr(os, name, step)


def _in_child(write, kill_at: int | None) -> int:
    """Run `write()` in a forked child killed before step `kill_at` (None: never); the number
    of steps it took when it ran to the end."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 3
        try:
            os.close(r)
            seen: list[str] = []
            _hook(kill_at, seen)
            write()
            os.write(w, json.dumps(seen).encode())
            code = 0
        except BaseException:
            os.write(w, traceback.format_exc().encode())
        finally:
            os._exit(code)
    os.close(w)
    code = _reap(pid)
    with os.fdopen(r, "rb") as f:  # a few hundred bytes: the child never blocks on the pipe
        said = f.read().decode()
    if kill_at is None:
        assert code == 0, said
        return len(json.loads(said))
    assert code in (KILLED, 0), said
    return 0


def _reap(pid: int) -> int:
    """The child's exit code; a child that hangs (a lock another thread held at the fork) is
    killed and the test fails, rather than CI waiting on it."""
    deadline = time.monotonic() + HUNG_S
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"the forked writer did not finish in {HUNG_S} s")
        time.sleep(0.005)


# --- the writes: (set up, write (in the child), the next run's sweep) -----------------------

def _pack(root, previous: bool):
    out = os.path.join(root, "out")
    if previous:
        packed_output(out, [shard_file(0), shard_file(1)], tag=b"old")

    def write():  # what write_output does: a marked temporary, the shards, the manifest, the swap
        tmp = temp_dir(out)
        m = os.path.join(packed_output(tmp, [shard_file(0)], tag=b"new"), MANIFEST)
        with open(m) as f:
            text = f.read()
        with write_file(m, "output", replace=True, text=True, manifest=True) as f:  # as pack writes it
            f.write(text)
        swap_into_place(tmp, out)
    return write, lambda: clean_stale(out)


def _restore(root):
    """The next run putting back an output a kill left set aside (the sweep's own two steps):
    the set-up is a swap killed right after its first rename."""
    out = os.path.join(root, "out")
    packed_output(out, [shard_file(0)], tag=b"old")
    pid = os.fork()
    if pid == 0:  # a dead run's, all of it (its temporary too)
        try:
            new = packed_output(temp_dir(out), [shard_file(0)], tag=b"new")
            real = os.replace

            def set_aside_then_die(a, b, **k):
                real(a, b, **k)
                if os.path.basename(a) == "out":
                    os._exit(0)
            os.replace = set_aside_then_die
            swap_into_place(new, out)
        finally:
            os._exit(3)
    assert _reap(pid) == 0 and not os.path.exists(out)
    return lambda: clean_stale(out), lambda: clean_stale(out)


def _file(root, replace: bool):
    p = os.path.join(root, "plan.parquet")
    if replace:
        with open(p, "wb") as f:
            f.write(b"the previous plan")

    def write():
        with write_file(p, "output", replace=replace) as f:
            f.write(b"the new plan, " * 100)
    return write, lambda: sweep_temps(p)


@pytest.fixture(scope="module")
def entry(tmp_path_factory):
    """A real tokenized cache entry (pre-tokenized rows): its files and its cache.json."""
    from packtool.tokenize import TokenizeConfig, tokenize_to_cache
    d = tmp_path_factory.mktemp("entry")
    src = str(d / "toks.parquet")
    pq.write_table(pa.table({"input_ids": pa.array([[1, 2, 3], [4, 5], [6, 7, 8, 9]], pa.list_(pa.int32()))}), src)
    cache = tokenize_to_cache([src], TokenizeConfig(shape="tokens"), str(d / "cache"), progress=False)
    files = {}
    for dd, _, names in os.walk(cache.root):
        for n in names:
            p = os.path.join(dd, n)
            files[os.path.relpath(p, cache.root)] = open(p, "rb").read()
    return os.path.basename(cache.root), files


def _copy_files(files: dict, into: str, skip=("cache.json",)) -> None:
    for rel, data in files.items():
        if rel in skip:
            continue
        p = os.path.join(into, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)


def _publish(root, entry):
    from packtool.tokenize.cache import publish_cache
    key, files = entry
    cache = os.path.join(root, "cache")
    os.makedirs(cache)
    meta = json.loads(files["cache.json"])
    meta.pop("checksums")

    def write():  # what tokenize_to_cache does around its build
        tmp = owned_temp_dir(f".tmp-{key[:12]}-{os.getpid()}-", cache)
        _copy_files(files, tmp)
        publish_cache(tmp, os.path.join(cache, key), dict(meta))
    return write, lambda: clean_cache(cache)


def _pull(root, entry):
    from packtool.tokenize.store_cache import pull_entry
    key, files = entry
    cache, store = os.path.join(root, "cache"), os.path.join(root, "store")
    os.makedirs(cache)
    _copy_files(files, os.path.join(store, key), skip=())
    return lambda: pull_entry("file://" + store, os.path.join(cache, key)), lambda: clean_cache(cache)


def _discard(root, entry):
    from packtool.tokenize.request import discard_cache
    key, files = entry
    cache = os.path.join(root, "cache")
    _copy_files(files, os.path.join(cache, key), skip=())
    return lambda: discard_cache(os.path.join(cache, key)), lambda: clean_cache(cache)


def _flat(root, entry):
    from packtool.tokenize.flat_tokens import build_flat_tokens
    key, _ = entry
    folder = os.path.join(root, "cache", key)
    os.makedirs(os.path.join(folder, "data"))
    part = os.path.join(folder, "data", "part-00000.parquet")
    ids = [[1, 2, 3], [4, 5]]
    pq.write_table(pa.table({"input_ids": pa.array(ids, pa.list_(pa.int32())),
                             "loss_mask": pa.array([[1, 1, 0], [0, 1]], pa.list_(pa.uint8())),
                             "length": pa.array([len(r) for r in ids], pa.int64())}), part)
    return (lambda: build_flat_tokens([part], os.path.join(folder, "flat"), threads=1),
            lambda: clean_cache(os.path.join(root, "cache")))


def _temporary(make, inside: str):
    def site(root, entry):
        out, cache = os.path.join(root, "out"), os.path.join(root, "cache")
        os.makedirs(cache)

        def write():  # made, written into, removed: a failed pack's, a verify --source's, ...
            d = make(out, cache)
            with open(os.path.join(d, inside), "wb") as f:
                f.write(b"half")
            remove_tree(d)
        return write, lambda: clean_stale(out, cache)
    return site


def _scratch(root, entry):
    """A task's scratch folder in the system temp (a shard or cache part before its upload)."""
    from packtool.output.store import scratch
    out, cache = os.path.join(root, "out"), os.path.join(root, "cache")

    def write():
        with scratch("shard") as d, open(os.path.join(d, shard_file(0)), "wb") as f:
            f.write(b"half a shard")
    return write, lambda: clean_stale(out, cache)


SITES = {
    "pack --overwrite: the swap over a previous output": lambda root, e: _pack(root, previous=True),
    "pack: the swap into a new folder": lambda root, e: _pack(root, previous=False),
    "the next run: a set-aside output put back": lambda root, e: _restore(root),
    "write_file replacing (plan -o/inspect --html --overwrite, train --save, manifest, cache.json)":
        lambda root, e: _file(root, replace=True),
    "write_file new (plan -o, inspect --html)": lambda root, e: _file(root, replace=False),
    "cache entry published": _publish,
    "cache entry pulled from a store": _pull,
    "damaged cache entry discarded": _discard,
    "flat store built": _flat,
    "temporary output folder": _temporary(lambda out, cache: temp_dir(out), MANIFEST),
    "spill folder beside the output": _temporary(lambda out, cache: spill_dir(out), "plan.pkl"),
    "spill folder in the system temp": _temporary(lambda out, cache: spill_dir(None), "plan.pkl"),
    "scratch folder of an upload task": _scratch,
    "verify --source cache": _temporary(
        lambda out, cache: owned_temp_dir(f".verify-source-{os.getpid()}-", cache), "0123456789abcdef"),
}


def _case(base, name, site, entry, dead_pid, monkeypatch):
    """A fresh folder for one run of `site`: the user's file and look-alike beside it, the
    system temp inside it; returns (root, write, sweep)."""
    root = os.path.join(base, name)
    use_system_temp(monkeypatch, os.path.join(root, "systmp"))
    with open(os.path.join(root, "thesis.txt"), "wb") as f:
        f.write(USER)
    lookalike = os.path.join(root, f".out.packtool-tmp-{dead_pid}-abcdefgh")  # packtool's form, no marker
    os.makedirs(lookalike)
    with open(os.path.join(lookalike, MANIFEST), "wb") as f:
        f.write(USER)
    write, sweep = site(root, entry)
    return root, write, sweep


@pytest.mark.parametrize("site", SITES)
def test_a_kill_between_any_two_steps_leaves_nothing_the_next_run_keeps(tmp_path, site, entry, dead_pid, monkeypatch):
    from packtool import notes
    run = SITES[site]
    root, write, sweep = _case(str(tmp_path), "never", run, entry, dead_pid, monkeypatch)
    sweep()
    never = tree(root, records=True)  # the write never started
    root, write, sweep = _case(str(tmp_path), "whole", run, entry, dead_pid, monkeypatch)
    steps = _in_child(write, None)
    sweep()
    whole = tree(root, records=True)  # the write finished
    assert not any(MARKER in k or v[-1] is True for k, v in whole.items()), whole
    assert steps >= 2
    bad = []
    for n in range(1, steps + 1):
        root, write, sweep = _case(str(tmp_path), f"k{n}", run, entry, dead_pid, monkeypatch)
        _in_child(write, n)
        start = notes.mark()
        sweep()
        got = tree(root, records=True)
        if got != never and got != whole:
            extra = sorted(set(got.items()) ^ set(whole.items()) if len(got) >= len(whole) else set(got.items()) ^ set(never.items()))
            bad.append(f"killed before step {n}: {[k for k, _ in extra][:6]}; said {notes.since(start)}")
        shutil.rmtree(root)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("case", ["dead run's", "live run's", "not packtool's form", "holds a file"])
def test_an_empty_folder_goes_only_in_packtools_own_form_and_with_its_pid_gone(tmp_path, dead_pid, monkeypatch, case):
    """What a kill between a folder's mkdir and its marker (or its marker's removal and its
    rmdir) leaves: an empty folder under a temporary's name, no marker. It goes by rmdir only
    when the name is exactly what packtool's mkdtemp makes and the pid in it is gone."""
    from packtool import notes
    use_system_temp(monkeypatch, tmp_path)
    pid = os.getpid() if case == "live run's" else dead_pid
    name = f"packtool-results-{pid}-0" if case == "not packtool's form" else f".o.packtool-tmp-{pid}-abcdefgh"
    d = tmp_path / name
    d.mkdir()
    if case == "holds a file":
        (d / MANIFEST).write_bytes(USER)
    before, start = tree(tmp_path, records=True), notes.mark()
    clean_stale(str(tmp_path / "o"))
    said = "\n".join(notes.since(start))
    if case == "dead run's":
        assert not d.exists() and "removed 1" in said
        return
    assert tree(tmp_path, records=True) == before
    assert (str(d) in said) == (case != "live run's")  # named, but a live run's left without a word
