"""`--load` reads a checkpoint as data, never as code, and a checkpoint it cannot use is one
line naming the file and the fix (exit 2), not a packtool bug; a shape named with `--load`
must be the checkpoint's (it was dropped without a word)."""
from __future__ import annotations

import os
import shutil

import pytest
import torch

pytest.importorskip("megatron.core")
typer = pytest.importorskip("typer")
from megatron_runs import TINY, small_slabs  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from packtool.errors import PacktoolError  # noqa: E402
from packtool.megatron.loop import TrainConfig, train  # noqa: E402
from packtool.megatron.model import GPTShape  # noqa: E402

SHAPE = GPTShape(layers=1, hidden=32, heads=2, ffn=64, vocab=128, max_seq=512)


class _Runs:
    """Unpickling this runs os.makedirs(marker): the proof that a load executed the file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.makedirs, (self.marker,))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(slab folder, a checkpoint folder a 1-step run saved)."""
    root = tmp_path_factory.mktemp("ck")
    data = small_slabs(root / "d", fp8="tensorwise")
    train(TrainConfig(data_dir=data, shape=SHAPE, steps=1, quiet=True, save=str(root / "ck")))
    return data, root / "ck"


def _damage(kind, good, path, marker):
    """Write checkpoint `kind` to `path`, made from the good one `good` where it needs one."""
    raw = good.read_bytes()
    ck = torch.load(good, weights_only=True)
    write = {
        "code in the model": lambda: torch.save({**ck, "model": _Runs(marker)}, path),
        "code, legacy format": lambda: torch.save({"model": _Runs(marker)}, path,
                                                   _use_new_zipfile_serialization=False),
        "a bare pickle": lambda: path.write_bytes(__import__("pickle").dumps(_Runs(marker))),
        "truncated": lambda: path.write_bytes(raw[:len(raw) // 2]),
        "empty": lambda: path.write_bytes(b""),
        "a text file": lambda: path.write_bytes(b"hello\n"),
        "a list": lambda: torch.save([1, 2], path),
        "no shape": lambda: torch.save({k: v for k, v in ck.items() if k != "shape"}, path),
        "step a bool": lambda: torch.save({**ck, "step": True}, path),
        "unknown shape key": lambda: torch.save({**ck, "shape": {**ck["shape"], "depth": 3}}, path),
        "tensors of another shape": lambda: torch.save(
            {**ck, "shape": {**ck["shape"], "ffn": 128}}, path),
        "another tp": lambda: torch.save({**ck, "tp": 2}, path),
        "a folder": lambda: path.mkdir(),
        "a FIFO": lambda: os.mkfifo(path),  # open() blocked forever (S35-11)
        "a device behind a link": lambda: path.symlink_to("/dev/zero"),
        "a socket": lambda: _bind(path),
    }[kind]
    path.unlink()
    write()


KINDS = ["code in the model", "code, legacy format", "a bare pickle", "truncated", "empty", "a text file",
         "a list", "no shape", "step a bool", "unknown shape key", "tensors of another shape", "another tp",
         "a folder", "a FIFO", "a device behind a link", "a socket"]
SPECIAL = {"a folder": "a folder", "a FIFO": "a FIFO (named pipe)", "a device behind a link": "a character device",
           "a socket": "a socket"}  # refused by kind, before any read


def _bind(path):
    import socket
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()  # the socket file stays


@pytest.mark.parametrize("kind", KINDS)
def test_load_refuses_what_is_not_a_checkpoint_it_wrote_and_runs_no_code(run, tmp_path, kind):
    data, good = run
    ck = tmp_path / "ck"
    shutil.copytree(good, ck)
    marker = str(tmp_path / "code-ran")
    _damage(kind, good / "mp_rank_00.pt", ck / "mp_rank_00.pt", marker)
    with pytest.raises(PacktoolError) as e:
        train(TrainConfig(data_dir=data, steps=1, quiet=True, load=str(ck)))
    assert not os.path.exists(marker), "loading the checkpoint ran code from it"
    msg = str(e.value)
    assert "mp_rank_00.pt" in msg and "\n" not in msg and e.value.exit_code == 2, msg
    assert ("tp" in msg) if kind == "another tp" else ("start without load" in msg), msg
    if kind in SPECIAL:
        assert f"is {SPECIAL[kind]}, not a regular file" in msg, msg


@pytest.fixture(scope="module")
def app():
    """packtool's own app: its errors name the flags (errors.arg spelled as FLAG_OF)."""
    from packtool.cli.app import app as packtool_app
    return packtool_app


@pytest.mark.parametrize("flags, said", [
    (["--hidden", "64"], "--hidden 64 (the checkpoint has 32)"),
    (["--layers", "3"], "--layers 3 (the checkpoint has 1)"),
    (["--heads", "4"], "--heads 4 (the checkpoint has 2)"),
    (["--ffn", "128"], "--ffn 128 (the checkpoint has 64)"),
    (["--config", "CFG"], "--layers 2 (the checkpoint has 1)"),
])
def test_load_refuses_a_shape_the_checkpoint_does_not_have(run, tmp_path, app, flags, said):
    data, ck = run
    cfg = tmp_path / "m.yaml"
    cfg.write_text("layers: 2\n")
    flags = [str(cfg) if f == "CFG" else f for f in flags]
    r = CliRunner().invoke(app, ["train", data, "--device", "cpu", "--steps", "1", "--load", str(ck), *flags])
    assert r.exit_code == 2, r.output
    assert said in " ".join(r.output.split()), r.output


def test_load_takes_the_shape_flags_that_agree(run, app):
    data, ck = run
    r = CliRunner().invoke(app, ["train", data, *TINY, "--steps", "1", "--load", str(ck)])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("where", ["save folder itself", "save/mp_rank_00.pt", "save/log.jsonl", "save/sub/log.jsonl",
                                   "load/log.jsonl", "link to save/log.jsonl"])
def test_json_log_is_never_inside_a_checkpoint_folder(run, tmp_path, app, where):
    """check_save lets only checkpoints live in --save: a log there was overwritten by the
    checkpoint (same name) or stopped the documented `--load ck --save ck` resume."""
    data, good = run
    shutil.copytree(good, tmp_path / "load")
    (tmp_path / "save").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "save")
    log = {"save folder itself": "save", "link to save/log.jsonl": "link/log.jsonl"}.get(where, where)
    flags = ["--load", str(tmp_path / "load")] if where.startswith("load") else []
    r = CliRunner().invoke(app, ["train", data, "--device", "cpu", "--steps", "1", "--save", str(tmp_path / "save"),
                                 "--json-log", str(tmp_path / log), *flags])
    assert r.exit_code == 2, r.output
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "--json-log" in errors[0], r.stderr
    assert sorted(p.name for p in (tmp_path / "save").iterdir()) == []
