"""S33-9 (3): a `.manifest.json` that is no regular file (a FIFO, a folder, a socket, a link to
nothing) is said by its kind, by every consumer (slabs.format.read_manifest: verify, inspect,
the datasets; the CLI's verify and inspect, verify --source's note), never "no .manifest.json"
and never opened (a FIFO with no writer would block the reader). L4: a link to nothing is said in the
link rule's words (slabs.open_rules.linked_shard: where it points, "a dangling link")."""
from __future__ import annotations

import json
import os
import socket

import numpy as np
import pytest
from slab_support import write_pack
from typer.testing import CliRunner

from packtool.align import Alignment
from packtool.errors import PacktoolError
from packtool.manifest_name import MANIFEST


def _fifo(p):
    os.mkfifo(p)


def _socket(p):
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(p))
    s.close()


KINDS = {"a FIFO (named pipe)": _fifo, "a folder": os.mkdir, "a socket": _socket,
         "a symbolic link to nothing": lambda p: os.symlink(str(p) + ".gone", p)}


def _library(name):
    def run(out):
        if name == "verify":
            from packtool import verify
            return verify(out)
        if name == "inspect":
            from packtool import inspect
            return inspect(out)
        if name == "SlabDataset":
            from packtool.hf import SlabDataset
            return SlabDataset(out)
        from packtool.megatron.dataset import PackedSlabDataset
        return PackedSlabDataset(out)
    return run


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    return write_pack(str(tmp_path_factory.mktemp("kinds")), np.arange(10, 20), Alignment(capacity=64))[0]


@pytest.fixture(params=list(KINDS))
def odd(request, packed, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    for f in os.listdir(packed):
        if f != MANIFEST:
            os.symlink(os.path.join(packed, f), out / f)
    KINDS[request.param](out / MANIFEST)
    return str(out), request.param


def _said(text, out, kind):
    if kind == "a symbolic link to nothing":  # L4: the link rule's words, naming where it points
        text = " ".join(text.split())
        assert f"{out}/{MANIFEST}: is a symbolic link to {out}/{MANIFEST}.gone, which does not exist " \
               f"(a dangling link)" in text, text
    else:
        assert f"{out}/{MANIFEST}: is {kind}, not a regular file" in text, text
    assert f"no {MANIFEST}" not in text, text


@pytest.mark.parametrize("entry", ["verify", "inspect", "SlabDataset", "PackedSlabDataset"])
def test_the_library_says_the_manifest_kind(odd, entry):
    out, kind = odd
    if entry == "verify":  # verify reports (ok=False) what fails
        report = _library(entry)(out)
        assert not report.ok
        _said(json.dumps(report.to_dict(), default=str), out, kind)
        return
    if entry == "PackedSlabDataset":
        pytest.importorskip("torch")
    with pytest.raises(PacktoolError) as e:
        _library(entry)(out)
    _said(str(e.value), out, kind)


@pytest.mark.parametrize("args", [["verify"], ["inspect"], ["verify", "--source", "SRC"]])
def test_the_command_line_says_the_manifest_kind(odd, args, tmp_path):
    from packtool.cli.app import app
    out, kind = odd
    src = tmp_path / "src.jsonl"
    src.write_text('{"input_ids": [1, 2, 3]}\n')
    argv = [args[0], out, *[str(src) if a == "SRC" else a for a in args[1:]], "--cache-dir", str(tmp_path / "c")]
    r = CliRunner().invoke(app, argv if "--source" in args else argv[:2])
    assert r.exit_code in (1, 2), r.output
    _said(r.stdout + r.stderr, out, kind)
    if "--source" in args:
        assert "its manifest is unusable" in r.stderr and "has no manifest" not in r.stderr, r.stderr
