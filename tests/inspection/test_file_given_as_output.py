"""A file given where a packed output folder is read is named as what it is, with the fix that
reads it (S40-9). Before: `packtool inspect plan.parquet` and `inspect lengths.npy` (the inputs
inspect's help names) said "a file, not a packtool output folder; give the folder that holds it"
-- the folder that holds a plan file is no output; the fix is `--plan` / `--lengths`.

The class: every reader of an output folder (inspect, verify, train on the command line;
read_manifest, packtool.hf.SlabDataset, the Megatron dataset in the library: all through
slabs.format.read_manifest) x every kind of file a user may pass (a plan file with and without
its recorded settings, lengths as .npy / .txt / Parquet, a shard, the manifest, another file):
exit 2, one line naming the file and the flag or folder that reads it, the file byte-identical."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.errors import PacktoolFormatError
from packtool.slabs.format import read_manifest

T = "/work/shared/data/tokenizers/gpt2/tokenizer.json"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    import pathlib
    if not pathlib.Path(T).exists():
        pytest.skip("no gpt2 tokenizer")
    d = tmp_path_factory.mktemp("f")
    np.save(d / "lens.npy", np.array([100, 200, 300]))
    (d / "lens.txt").write_text("100\n200\n")
    pq.write_table(pa.table({"length": [5, 6]}), d / "lens.parquet")
    r = CliRunner().invoke(app, ["plan", "--lengths", str(d / "lens.npy"), "-o", str(d / "plan.parquet")])
    assert r.exit_code == 0, r.output
    t = pq.read_table(d / "plan.parquet")
    pq.write_table(t.replace_schema_metadata(None), d / "oldplan.parquet")  # an older plan records none
    (d / "a.jsonl").write_text('{"text": "hello world"}\n')
    r = CliRunner().invoke(app, ["pack", str(d / "a.jsonl"), "--tokenizer", T, "-C", "64", "-o", str(d / "out"),
                                 "--cache-dir", str(d / "cache")])
    assert r.exit_code == 0, r.output
    return d


KINDS = {  # the file -> what its line must hold (beyond the file's name)
    "plan.parquet": ("a plan file", "--plan {p}"),
    "oldplan.parquet": ("a plan file", "--plan {p}"),
    "lens.npy": ("--lengths {p}",),
    "lens.txt": ("--lengths {p}",),
    "lens.parquet": ("--lengths {p}",),
    "out/slabs-00000.parquet": ("give the folder that holds it ({d}/out)",),
    "out/.manifest.json": ("give the folder that holds it ({d}/out)",),
    "a.jsonl": ("`packtool pack -o`",),
}
COMMANDS = {"inspect": ["inspect", "{p}"], "verify": ["verify", "{p}"],
            "train": ["train", "{p}", "--device", "cpu", "--steps", "1"]}


def _want(files, kind):
    p = str(files / kind)
    return [w.format(p=p, d=files) for w in KINDS[kind]]


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("kind", list(KINDS))
def test_the_command_line_names_the_file_and_its_flag(files, kind, command):
    p = files / kind
    before = p.read_bytes()
    r = CliRunner().invoke(app, [a.format(p=p) for a in COMMANDS[command]])
    assert r.exit_code == 2, r.output
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {p}: a file, not a packtool output folder"), r.stderr
    assert all(w in errors[0] for w in _want(files, kind)), errors
    assert "Traceback" not in r.output and p.read_bytes() == before
    if "plan" in kind or "lens" in kind:
        assert "folder that holds it" not in errors[0], errors


def _readers():
    out = {"read_manifest": read_manifest}
    try:
        from packtool.hf import SlabDataset
        out["hf.SlabDataset"] = SlabDataset
    except ImportError:
        pass
    try:
        from packtool.megatron import PackedSlabDataset
        out["megatron.PackedSlabDataset"] = PackedSlabDataset
    except ImportError:
        pass
    return out


@pytest.mark.parametrize("reader", ["read_manifest", "hf.SlabDataset", "megatron.PackedSlabDataset"])
@pytest.mark.parametrize("kind", ["plan.parquet", "lens.npy", "out/slabs-00000.parquet"])
def test_the_library_readers_say_the_same(files, kind, reader):
    readers = _readers()
    if reader not in readers:
        pytest.skip(f"{reader} not importable here")
    with pytest.raises(PacktoolFormatError) as e:
        readers[reader](str(files / kind))
    msg = str(e.value)
    assert "\n" not in msg and all(w in msg for w in _want(files, kind)), msg


def test_a_fifo_is_never_opened(tmp_path):
    import os
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(PacktoolFormatError, match="a file, not a packtool output folder"):
        read_manifest(str(fifo))  # would block on open if it were read


def test_json_says_the_same(files):
    p = files / "plan.parquet"
    r = CliRunner().invoke(app, ["--json", "inspect", str(p)])
    assert r.exit_code == 2
    err = json.loads(r.stdout)["error"]
    assert f"--plan {p}" in err["message"] and err["path"] == str(p), err
