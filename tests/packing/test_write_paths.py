"""Every path packtool opens for writing goes through packtool.output, tested as a class:
the lock, the pack output folder and its temporary and spill folders, the manifest, the
cache's cache.json, `plan -o`, `inspect --html`, `train --save` and `--json-log`. For each:
a symbolic link at the name is never written through, an existing file is replaced only
with the flag that allows it (never an input), a file appearing mid-write is kept, and each
refusal is one `error:` line naming what and where, exit 2, no traceback, the user's files
byte-identical and nothing left behind."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from leftover_support import snapshot
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.errors import PacktoolOutputError
from packtool.output.files import open_append, open_exclusive, write_file
from packtool.output.folder import lock_path
from writer_support import WRITERS, write_into

runner = CliRunner()
THESIS = b"my thesis, three years of work\n"
MARKS = ("packtool-tmp", "packtool-spill", ".packtool.lock", ".tmp-", ".verify-source-", ".damaged-", ".pull-")


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _leftovers(root) -> list[str]:
    return [os.path.join(d, x) for d, dirs, files in os.walk(root) for x in dirs + files
            if any(m in x for m in MARKS)]


def refused(root, args, *needles, code=2):
    before, planted = snapshot(root), _leftovers(root)
    r = runner.invoke(app, args)
    text = r.stdout + r.stderr
    assert r.exit_code == code, text
    assert "Traceback" not in text and (r.exception is None or isinstance(r.exception, SystemExit)), text
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, text
    for n in needles:
        assert n in lines[0], (n, lines[0])
    assert snapshot(root) == before
    assert _leftovers(root) == planted
    return lines[0]


@pytest.fixture
def proj(tmp_path, monkeypatch):
    """A user's folder: a thesis, pre-tokenized rows, a lengths file, a previous output."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "thesis.txt").write_bytes(THESIS)
    with open(tmp_path / "toks.jsonl", "w") as f:
        for i in range(40):
            f.write(json.dumps({"input_ids": list(range(1, 8 + i % 5))}) + "\n")
    np.save(tmp_path / "lengths.npy", np.arange(1, 60, dtype=np.int64))
    return tmp_path


def pack_args(*extra):
    return ["pack", "toks.jsonl", "-C", "64", "--cache-dir", "cache", "--no-progress", *extra]


# --- a link at the name: never written through ---------------------------------------------

LINKED = {
    "lock": (".packed.packtool.lock", lambda: pack_args("-o", "packed"), "is a symbolic link"),
    "plan": ("plan.parquet", lambda: ["plan", "--lengths", "lengths.npy", "-o", "plan.parquet", "--overwrite"],
             "is a symbolic link"),
    "html": ("report.html", lambda: ["inspect", "--lengths", "lengths.npy", "--html", "report.html",
                                     "--overwrite"], "is a symbolic link"),
}


@pytest.mark.parametrize("what", sorted(LINKED))
def test_a_link_at_the_name_is_never_written_through(proj, what):
    name, args, needle = LINKED[what]
    os.symlink("thesis.txt", proj / name)
    refused(proj, args(), needle)
    assert (proj / "thesis.txt").read_bytes() == THESIS


def test_a_hard_link_or_foreign_file_as_lock_is_refused(proj):
    os.link(proj / "thesis.txt", proj / ".packed.packtool.lock")
    refused(proj, pack_args("-o", "packed"), "not a packtool lock file")
    os.unlink(proj / ".packed.packtool.lock")
    (proj / ".packed.packtool.lock").write_bytes(THESIS)
    refused(proj, pack_args("-o", "packed"), "not a packtool lock file")
    assert (proj / "thesis.txt").read_bytes() == THESIS


def test_a_stale_lock_of_a_dead_run_is_taken(proj):
    from packtool.output.lock import lock_text
    (proj / ".packed.packtool.lock").write_bytes(lock_text(_dead_pid()))
    r = runner.invoke(app, pack_args("-o", "packed"))
    assert r.exit_code == 0, r.stdout + r.stderr
    assert not os.path.lexists(lock_path(str(proj / "packed")))


@pytest.mark.parametrize("opener", ["write_file", "open_append", "open_exclusive"])
def test_library_openers_never_follow_a_link(tmp_path, opener):
    victim = tmp_path / "thesis.txt"
    victim.write_bytes(THESIS)
    link = tmp_path / "out.bin"
    os.symlink(victim, link)
    with pytest.raises((PacktoolOutputError, FileExistsError)):
        if opener == "write_file":
            with write_file(link, "--output", replace=True) as f:
                f.write(b"x")
        elif opener == "open_append":
            open_append(link, "--json-log")
        else:
            open_exclusive(str(link))
    assert victim.read_bytes() == THESIS and os.listdir(tmp_path) == sorted(os.listdir(tmp_path))
    assert _leftovers(tmp_path) == []


# --- an existing file: replaced only with the flag, never an input -------------------------

# the user's file under a name of the target's kind (plan -o takes a .parquet name alone, 5e0cfd6)
EXISTING = {
    "plan": (["plan", "--lengths", "lengths.npy", "-o", "results.parquet"], "--overwrite"),
    "html": (["inspect", "--lengths", "lengths.npy", "--html", "thesis.txt"], "--overwrite"),
}


@pytest.mark.parametrize("what", sorted(EXISTING))
def test_an_existing_file_needs_the_flag(proj, what):
    args, flag = EXISTING[what]
    name = args[-1]
    (proj / name).write_bytes(THESIS)
    refused(proj, args, name, "exists", flag)
    assert (proj / name).read_bytes() == THESIS
    r = runner.invoke(app, args + [flag])
    assert r.exit_code == 0, r.stdout + r.stderr
    assert (proj / name).read_bytes() != THESIS and _leftovers(proj) == []


@pytest.mark.parametrize("args", [
    ["plan", "--lengths", "lengths.npy", "-o", "lengths.npy", "--overwrite"],
    ["inspect", "--lengths", "lengths.npy", "--html", "lengths.npy", "--overwrite"],
])
def test_an_input_is_never_replaced(proj, args):
    refused(proj, args, "is the input lengths.npy")


@pytest.mark.parametrize("args,needle", [
    (["plan", "--lengths", "lengths.npy", "-o", "nowhere/plan.parquet"], "does not exist"),
    (["plan", "--lengths", "lengths.npy", "-o", "."], "is a folder"),
    (["inspect", "--lengths", "lengths.npy", "--html", "cache"], "is a folder"),
])
def test_a_file_target_that_cannot_be_written(proj, args, needle):
    (proj / "cache").mkdir()
    refused(proj, args, needle)


def test_a_fifo_as_target_is_refused_not_blocked_on(proj):
    os.mkfifo(proj / "pipe")
    refused(proj, ["plan", "--lengths", "lengths.npy", "-o", "pipe", "--overwrite"], "FIFO")
    with pytest.raises(PacktoolOutputError, match="FIFO"):
        open_append(proj / "pipe", "--json-log")


def test_train_save_holding_checkpoints_needs_overwrite(tmp_path):
    pytest.importorskip("torch")
    from packtool.megatron.loop import check_save
    import torch
    from packtool.megatron.checkpoint import KEYS
    d = tmp_path / "ckpt"
    d.mkdir()
    torch.save(dict.fromkeys(KEYS, 0), d / "mp_rank_00.pt")  # a checkpoint by its record (a user's file is never one)
    with pytest.raises(PacktoolOutputError, match="overwrite=True"):
        check_save(str(d), None, False)
    assert check_save(str(d), str(d), False) == str(d)  # resuming into the --load folder
    assert check_save(str(d), None, True) == str(d)
    os.unlink(d / "mp_rank_00.pt")
    os.symlink(tmp_path / "elsewhere.pt", d / "mp_rank_00.pt")
    with pytest.raises(PacktoolOutputError, match="symbolic link"):
        check_save(str(d), None, True)
    os.unlink(d / "mp_rank_00.pt")
    os.symlink(tmp_path / "nothing", tmp_path / "dangling")
    with pytest.raises(PacktoolOutputError, match="does not exist"):
        check_save(str(tmp_path / "dangling"), None, False)


# --- races: what appears at the name while packtool writes is kept --------------------------

@pytest.mark.parametrize("appears", ["file", "link"])
def test_a_file_appearing_mid_write_is_kept(tmp_path, appears):
    target = tmp_path / "plan.parquet"
    with pytest.raises(PacktoolOutputError, match="appeared"):
        with write_file(target, "--output") as f:
            f.write(b"new")
            if appears == "file":
                target.write_bytes(THESIS)
            else:
                (tmp_path / "thesis.txt").write_bytes(THESIS)
                os.symlink(tmp_path / "thesis.txt", target)
    assert target.read_bytes() == THESIS and _leftovers(tmp_path) == []


def test_a_link_planted_mid_write_with_replace_is_not_written_through(tmp_path):
    (tmp_path / "thesis.txt").write_bytes(THESIS)
    target = tmp_path / "report.html"
    with pytest.raises(PacktoolOutputError, match="link"):
        with write_file(target, "--html", replace=True) as f:
            f.write(b"new")
            os.symlink(tmp_path / "thesis.txt", target)
    assert (tmp_path / "thesis.txt").read_bytes() == THESIS and _leftovers(tmp_path) == []


def test_a_dead_writers_temporary_is_removed_by_the_next_write(tmp_path):
    from packtool.output.leftovers import XATTR, mark_file
    dead = _dead_pid()
    stale = tmp_path / f".plan.parquet.packtool-tmp-{dead}-0badc0de"
    fd = open_exclusive(str(stale))
    os.write(fd, b"half")
    mark_file(fd)  # as write_file marks its temporary; then as the run `dead`'s
    os.close(fd)
    os.setxattr(stale, XATTR, json.dumps(dict(json.loads(os.getxattr(stale, XATTR)), pid=dead, start="1")).encode())
    with write_file(tmp_path / "plan.parquet", "--output") as f:
        f.write(b"whole")
    assert sorted(os.listdir(tmp_path)) == ["plan.parquet"]


# --- --overwrite deletes only what is packtool's ---------------------------------------------

def _manifest_naming(folder, entries):
    from leftover_support import whole_manifest

    from packtool.slabs.names import MANIFEST
    (folder / MANIFEST).write_text(json.dumps(whole_manifest(entries)))


@pytest.mark.parametrize("case", ["user file named", "shard name, wrong checksum", "shard name, no checksum"])
def test_overwrite_never_deletes_a_file_a_manifest_merely_names(proj, case):
    from packtool.tokenize.checksum import shard_checksum
    out = proj / "packed"
    out.mkdir()
    name = "thesis.docx" if case == "user file named" else "slabs-00000.parquet"
    (out / name).write_bytes(THESIS)
    rec = {"file": name, "bytes": len(THESIS), "xxh3_128": shard_checksum(str(out / name))}
    if case == "shard name, wrong checksum":
        rec["xxh3_128"] = "0" * 32
    if case == "shard name, no checksum":
        del rec["xxh3_128"]
    _manifest_naming(out, [rec])
    refused(proj, pack_args("-o", "packed", "--overwrite"), name, "not packtool's")
    assert (out / name).read_bytes() == THESIS


# --- paths: resolved once, checked once, that path used -------------------------------------

@pytest.mark.parametrize("given,where", [("~/packed", "home/packed"), ("./out/./", "out"),
                                         ("sub/../out2//", "out2")])
def test_output_path_spellings(proj, monkeypatch, given, where):
    (proj / "home").mkdir()
    (proj / "sub").mkdir()
    monkeypatch.setenv("HOME", str(proj / "home"))
    r = runner.invoke(app, pack_args("-o", given))
    assert r.exit_code == 0, r.stdout + r.stderr
    assert os.path.isfile(proj / where / ".manifest.json")
    assert not os.path.exists(proj / "~") and _leftovers(proj) == []


@pytest.mark.parametrize("where", ["same file system", "another file system"])
def test_output_a_link_to_a_folder_writes_the_folder(proj, where):
    import tempfile
    if where == "same file system":
        base = str(proj)
    else:  # /dev/shm is a tmpfs on Linux: the temporary folder must sit beside the real target
        if not os.path.isdir("/dev/shm") or os.stat("/dev/shm").st_dev == os.stat(proj).st_dev:
            pytest.skip("no second file system here")
        base = tempfile.mkdtemp(dir="/dev/shm")
    real = os.path.join(base, "real")
    os.mkdir(real)
    os.symlink(real, proj / "link")
    try:
        r = runner.invoke(app, pack_args("-o", "link"))
        assert r.exit_code == 0, r.stdout + r.stderr
        assert os.path.islink(proj / "link") and os.path.isfile(os.path.join(real, ".manifest.json"))
        assert _leftovers(proj) == [] and _leftovers(base) == []
    finally:
        if base != str(proj):
            import shutil
            shutil.rmtree(base, ignore_errors=True)


def test_output_a_dangling_link_is_refused_before_any_work(proj):
    os.symlink(proj / "nowhere" / "x", proj / "packed")
    refused(proj, pack_args("-o", "packed"), "does not exist")
    assert not os.path.exists(proj / "cache")  # refused before tokenizing


# --- nothing left behind that no later run removes ------------------------------------------

def test_a_failed_pack_removes_the_parents_it_created(proj):
    with open(proj / "toks.jsonl", "a") as f:
        f.write(json.dumps({"input_ids": list(range(1, 200))}) + "\n")  # longer than -C 64
    r = runner.invoke(app, pack_args("-o", "new/deeper/packed"))
    assert r.exit_code == 2 and "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr
    assert not os.path.exists(proj / "new") and _leftovers(proj) == []


def test_dead_runs_leftovers_in_the_cache_are_removed_by_the_next_run(proj):
    from packtool.output.leftovers import MARKER, mark
    cache = proj / "cache"
    cache.mkdir()
    dead = _dead_pid()
    for name in (f".verify-source-{dead}-abc", f"0123abcd.damaged-{dead}", f".tmp-0123abcd-{dead}-x",
                 f".pull-0123abcd-{dead}-x"):
        (cache / name / ("0123abcd0123abcd" if name.startswith(".verify") else "data")).mkdir(parents=True)
        mark(str(cache / name))  # as the killed run wrote it: only this marker proves it packtool's
        rec = json.loads((cache / name / MARKER).read_text())
        (cache / name / MARKER).write_text(json.dumps(dict(rec, pid=dead, start="1")))
    (cache / "keep-me").mkdir()
    r = runner.invoke(app, pack_args("-o", "packed"))
    assert r.exit_code == 0, r.stdout + r.stderr
    assert _leftovers(cache) == [] and (cache / "keep-me").is_dir()


def test_output_folder_mode_follows_the_umask(proj):
    r = runner.invoke(app, pack_args("-o", "packed"))
    assert r.exit_code == 0, r.stdout + r.stderr
    mask = os.umask(0)
    os.umask(mask)
    assert os.stat(proj / "packed").st_mode & 0o777 == 0o777 & ~mask


# --- temporary, spill and cache names: a planted link is never followed ----------------------

def test_links_planted_at_temporary_and_spill_names_are_not_followed(proj):
    """Temporary and spill folders get random names created exclusively; links planted at the
    names a run of this pid would once have used are neither followed nor removed."""
    victim = proj / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_bytes(THESIS)
    pid = os.getpid()
    planted = [f".packed.packtool-tmp-{pid}", f".packed.packtool-spill-{pid}", f".packed.packtool-tmp-{pid}.old"]
    for name in planted:
        os.symlink(victim, proj / name)
    r = runner.invoke(app, pack_args("-o", "packed", "--plan-shard-rows", "16"))
    assert r.exit_code == 0, r.stdout + r.stderr
    assert sorted(os.listdir(victim)) == ["keep.txt"] and (victim / "keep.txt").read_bytes() == THESIS
    assert all(os.path.islink(proj / n) for n in planted)


def test_a_link_at_cache_json_is_not_written_through(tmp_path):
    from packtool.tokenize.cache import write_cache_json
    (tmp_path / "thesis.txt").write_bytes(THESIS)
    entry = tmp_path / "entry"
    entry.mkdir()
    os.symlink(tmp_path / "thesis.txt", entry / "cache.json")
    with pytest.raises(PacktoolOutputError, match="symbolic link"):
        write_cache_json(str(entry), {"a": 1})
    assert (tmp_path / "thesis.txt").read_bytes() == THESIS and _leftovers(tmp_path) == []


def test_the_manifest_is_published_whole(tmp_path):
    from packtool.slabs.format import write_manifest
    from packtool.slabs.names import MANIFEST
    path = write_manifest(str(tmp_path), {"format": "x"})
    assert os.path.basename(path) == MANIFEST and json.load(open(path)) == {"format": "x"}
    assert sorted(os.listdir(tmp_path)) == [MANIFEST]


# --- anything packtool writes, inside a packed output at any depth: a stray shard to every reader ---
# (S32-2: `pack -o packed/x/y` was taken, and the previous output stopped verifying; every
# writer asks output.relations.packed_problem, CLI and library alike)

@pytest.mark.parametrize("depth", ["", "x", "x/y"])
@pytest.mark.parametrize("what", WRITERS)
def test_nothing_packtool_writes_for_the_user_lands_inside_a_packed_output(proj, what, depth):
    assert runner.invoke(app, pack_args("-o", "packed")).exit_code == 0
    if depth:
        os.makedirs(proj / "packed" / depth)
    before = snapshot(proj / "packed")
    out = os.path.join("packed", depth) if depth else "packed"
    if what.startswith(("train", "library")):
        if what.startswith("train"):
            pytest.importorskip("torch")
        with pytest.raises(PacktoolOutputError, match="inside a packed output folder"):
            write_into(what, out)
    else:
        r = write_into(what, out)
        assert r.exit_code == 2 and "inside a packed output folder" in r.stderr, r.stdout + r.stderr
    assert snapshot(proj / "packed") == before and not _leftovers(proj)
    if depth:
        import shutil
        shutil.rmtree(proj / "packed" / "x")
    assert runner.invoke(app, ["verify", "packed", "-q"]).exit_code == 0


@pytest.mark.parametrize("what", ["plan -o", "inspect --html", "train --save", "train --json-log"])
def test_a_local_file_flag_given_a_uri_is_one_line(proj, what):
    """Reports, plans, logs and checkpoints are local files: a URI was written to a local
    folder named s3: (only pack -o writes to a store)."""
    assert runner.invoke(app, pack_args("-o", "packed")).exit_code == 0
    if what.startswith("train"):
        pytest.importorskip("torch")
        with pytest.raises(PacktoolOutputError, match="writes a local (file|folder)"):
            write_into(what, "s3://bucket/x")
    else:
        r = write_into(what, "s3://bucket/x") if what == "plan -o" else \
            runner.invoke(app, ["inspect", "packed", "--html", "s3://bucket/x/report.html"])
        assert r.exit_code == 2 and "writes a local file" in r.stderr, r.stdout + r.stderr
    assert not os.path.exists(proj / "s3:")


@pytest.mark.parametrize("what", ["plan -o", "inspect --html", "train --json-log"])
def test_a_file_flag_given_dash_is_refused_not_a_file_named_dash(proj, what):
    """`-` is stdin for an input; as a file target it made a file named '-' in the working
    folder, exit 0 (S41-10)."""
    assert runner.invoke(app, pack_args("-o", "packed")).exit_code == 0
    before = sorted(os.listdir(proj))
    if what == "train --json-log":
        pytest.importorskip("torch")
        from types import SimpleNamespace

        from packtool.megatron.loop import check_json_log
        with pytest.raises(PacktoolOutputError, match="names standard output, but json_log writes a file") as e:
            check_json_log(SimpleNamespace(json_log="-", load=None, inputs=(), overwrite=False))
        assert "\n" not in str(e.value)
    else:
        args = ["plan", "--lengths", "lengths.npy", "-o", "-"] if what == "plan -o" else ["inspect", "packed", "--html", "-"]
        r = runner.invoke(app, args)
        lines = r.stderr.strip().splitlines()
        assert r.exit_code == 2 and len(lines) == 1, r.stdout + r.stderr
        flag = "--output" if what == "plan -o" else "--html"
        assert f"names standard output, but {flag} writes a file" in lines[0] and "Traceback" not in r.stderr
    assert sorted(os.listdir(proj)) == before and not os.path.exists(proj / "-")
