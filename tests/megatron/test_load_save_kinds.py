"""`train --load` and `--save` name what a path is when it is not what the flag takes (S42-8):
every --load that was not a checkpoint folder (the checkpoint file itself, a missing path, a
packed output, a file, a FIFO, a device, a link to nothing, an empty folder, a folder of another
TP rank's file) said "no mp_rank_00.pt ...: give the folder a saved run wrote", the path twice;
a non-file of a checkpoint's name in --save was told to "give a file name such as out.bin",
though --save takes a folder (output.paths.check_new_file, every folder flag's files). Each is
one line, exit 2, naming the kind and the fix, with nothing written and nothing changed."""
from __future__ import annotations

import json
import os
import shutil

import pytest

pytest.importorskip("megatron.core")
pytest.importorskip("typer")
from megatron_runs import TINY, one_step_run, run_cli  # noqa: E402, F401  (the module's fixture)

from packtool.megatron.model import GPTShape  # noqa: E402

SHAPE = GPTShape(layers=1, hidden=32, heads=2, ffn=64, vocab=128, max_seq=512)


def _tree(tmp, data, good):
    """The --load paths, below tmp; returns {case: path}."""
    ck = tmp / "ck"
    ck.mkdir()
    shutil.copyfile(good, ck / "mp_rank_00.pt")
    (tmp / "notes.txt").write_text("mine\n")
    os.mkfifo(tmp / "pipe")
    os.symlink(tmp / "nothing", tmp / "dangling")
    (tmp / "empty").mkdir()
    (tmp / "rank1").mkdir()
    shutil.copyfile(good, tmp / "rank1" / "mp_rank_01.pt")
    return ck


# case -> (path below tmp (DATA: the packed output trained on), words the one line holds)
LOADS = {
    "the checkpoint file": ("ck/mp_rank_00.pt", ["is a checkpoint file", "takes the folder that holds it",
                                                 "--load {tmp}/ck"]),
    "a missing path": ("nonexist", ["no such folder", "--save` wrote"]),
    "a packed output": ("DATA", ["is a packed output folder, not a checkpoint folder", "DATA_DIR"]),
    "a user's file": ("notes.txt", ["is a regular file, not a checkpoint folder"]),
    "a FIFO": ("pipe", ["is a FIFO", "not a checkpoint folder"]),
    "a device": ("/dev/null", ["is a character device", "not a checkpoint folder"]),
    "a link to nothing": ("dangling", ["is a symbolic link to nothing", "not a checkpoint folder"]),
    "an empty folder": ("empty", ["holds no checkpoint (no mp_rank_00.pt)", "--save` wrote"]),
    "another TP rank's file only": ("rank1", ["holds mp_rank_01.pt but no mp_rank_00.pt", "--tp"]),
}


def _snapshot(tmp):
    return {str(p): (p.read_bytes() if p.is_file() and not p.is_symlink() else None)
            for p in sorted(tmp.rglob("*")) if not p.is_fifo()}


@pytest.mark.parametrize("case", LOADS)
def test_load_names_what_the_path_is(one_step_run, tmp_path, case):
    data, good = one_step_run
    _tree(tmp_path, data, good)
    rel, words = LOADS[case]
    path = data if rel == "DATA" else rel if rel.startswith("/") else str(tmp_path / rel)
    before = _snapshot(tmp_path)
    r = run_cli(["train", data, *TINY, "--steps", "1", "--load", path, "--json"])
    assert r.exit_code == 2, r.output
    err = json.loads(r.stdout.strip().splitlines()[-1])["error"]
    line = err["message"]
    assert "\n" not in line and "Traceback" not in r.output, r.output
    for w in words:
        assert w.format(tmp=tmp_path) in line, line
    assert "give the folder a saved run wrote" not in line
    assert line.count(path) <= 1 and err["path"] == path and err["flag"] == "--load", err
    assert _snapshot(tmp_path) == before


# what sits at --save's checkpoint name
def _fifo(p):
    os.mkfifo(p)


def _folder(p):
    p.mkdir()
    (p / "mine.txt").write_text("mine\n")


def _link(p):
    (p.parent.parent / "elsewhere.pt").write_text("elsewhere\n")
    os.symlink(p.parent.parent / "elsewhere.pt", p)


def _device(p):
    os.mknod(p, 0o600 | __import__("stat").S_IFCHR, os.makedev(1, 3))


SAVES = {"a FIFO": (_fifo, "is a FIFO"), "a folder": (_folder, "is a folder"),
         "a link": (_link, "is a symbolic link"), "a character device": (_device, "is a character device")}


@pytest.mark.parametrize("overwrite", [True, False])
@pytest.mark.parametrize("case", SAVES)
def test_save_names_what_sits_at_a_checkpoint_name(one_step_run, tmp_path, case, overwrite):
    data, _ = one_step_run
    make, said = SAVES[case]
    sv = tmp_path / "sv"
    sv.mkdir()
    try:
        make(sv / "mp_rank_00.pt")
    except PermissionError:
        pytest.skip("no permission to make a device here")
    before = _snapshot(tmp_path)
    r = run_cli(["train", data, *TINY, "--steps", "1", "--save", str(sv), "--json",
                 *(["--overwrite"] if overwrite else [])])
    assert r.exit_code == 2, r.output
    line = json.loads(r.stdout.strip().splitlines()[-1])["error"]["message"]
    assert "\n" not in line and "Traceback" not in r.output, r.output
    assert said in line and "give another --save folder" in line and "file name such as" not in line, line
    assert _snapshot(tmp_path) == before and sorted(p.name for p in sv.iterdir()) == ["mp_rank_00.pt"]


def test_the_findings_load_of_the_checkpoint_file(one_step_run, tmp_path):
    data, good = one_step_run
    ck = _tree(tmp_path, data, good)
    r = run_cli(["train", data, *TINY, "--steps", "1", "--load", str(ck / "mp_rank_00.pt")])
    assert r.exit_code == 2
    assert r.stderr.strip() == (f"error: {ck}/mp_rank_00.pt: is a checkpoint file; --load takes the folder that "
                                f"holds it: --load {ck}"), r.stderr
