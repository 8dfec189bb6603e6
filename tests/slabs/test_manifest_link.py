"""S45A-15: the manifest is held to the shards' rule on links (slabs.open_rules.linked_shard). A
`.manifest.json` (or an older output's `manifest.json`) that is a symbolic link out of the output
folder or to nothing is refused by every reader, verify, inspect and FORMAT.md's standalone
reader alike; one to a regular file inside the folder is read (verify notes it); and `pack
--overwrite` replaces no output whose manifest is a user's link, as it replaces none whose shard
is. Parametrized over the link's kind, the manifest's two names and every reader. L4: a link to nothing
named manifest.json (the older name) read as "no manifest": it is said as a dangling link, as under the
current name, and `verify --source` says the manifest is unusable, not absent."""
from __future__ import annotations

import os
import shutil

import pytest
from conftest import GPT2, PEPS
from typer.testing import CliRunner

from packtool.align import Alignment
from packtool.cli.app import app
from packtool.errors import PacktoolError
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig
from packtool.verification.run import verify

NAMES = [".manifest.json", "manifest.json"]
KINDS = ["outside", "dangling", "inside"]


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlink")
    out = str(root / "out")
    pack([PEPS], Alignment(cp=2, capacity=1024), PackingConfig("bfd", overflow="split"),
         TokenizeConfig(tokenizer=GPT2), output=out, cache_dir=str(root / "cache"), shard_tokens=20_000)
    return out, str(root / "cache")


def _linked(packed, tmp_path, name, kind) -> tuple[str, str]:
    """A copy of the output whose manifest (under `name`) is a link of `kind`; its target."""
    out = str(tmp_path / "out")
    shutil.copytree(packed[0], out)
    os.rename(os.path.join(out, ".manifest.json"), os.path.join(out, name))
    keep = tmp_path / "keep"
    keep.mkdir()
    target = {"outside": str(keep / "m.json"), "dangling": str(keep / "gone.json"),
              "inside": os.path.join(out, ".real-manifest.json")}[kind]
    if kind != "dangling":
        shutil.move(os.path.join(out, name), target)
    else:
        os.remove(os.path.join(out, name))
    os.symlink(target, os.path.join(out, name))
    return out, target


def _standalone(out, tmp_path):
    from slab_support import run_format_reader
    return run_format_reader(out, tmp_path)


def _consumers():
    pytest.importorskip("torch")
    from packtool.hf import SlabDataset
    from packtool.megatron.dataset import PackedSlabDataset
    from packtool.slabs.format import SlabManifest
    from packtool.slabs.reader import SlabIndex
    return [SlabDataset, PackedSlabDataset, lambda out: SlabIndex.build(SlabManifest.read(out))]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", NAMES)
def test_every_reader_holds_the_manifest_to_the_shards_link_rule(packed, tmp_path, name, kind):
    out, target = _linked(packed, tmp_path, name, kind)
    rep = verify(out, workers=1)
    r = CliRunner().invoke(app, ["verify", out])
    i = CliRunner().invoke(app, ["inspect", out])
    p = _standalone(out, tmp_path)
    if kind == "inside":  # that file's bytes, read as the manifest; said, as a shard link is
        assert rep.ok and any(f"{name} is a symbolic link" in n for n in rep.notes), rep
        assert r.exit_code == 0 and i.exit_code == 0, r.output + i.output
        assert p.returncode == 0, p.stderr[-600:]
        for consumer in _consumers():
            consumer(out)
        return
    # L4: a link to nothing, under either name, is said as one (it was "no manifest" under the older name)
    said = "a dangling link" if kind == "dangling" else "symbolic link"
    assert [x.check for x in rep.problems] == ["manifest"] and said in rep.problems[0].message, rep
    assert r.exit_code == 1 and said in r.output, r.output
    assert i.exit_code == 2 and said in " ".join(i.output.split()) and "Traceback" not in i.output, i.output
    # FORMAT.md's standalone reader finds neither name through a link to nothing: "missing" (its own words)
    older_dangling = (name, kind) == ("manifest.json", "dangling")
    assert p.returncode != 0 and ("missing" if older_dangling else "symbolic link") in p.stderr, p.stderr
    for consumer in _consumers():
        with pytest.raises(PacktoolError, match=said):
            consumer(out)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", NAMES)
def test_overwrite_replaces_no_output_whose_manifest_is_a_link(packed, tmp_path, name, kind):
    out, target = _linked(packed, tmp_path, name, kind)
    before = open(target, "rb").read() if kind != "dangling" else None
    r = CliRunner().invoke(app, ["pack", PEPS, "--tokenizer", GPT2, "--max-tokens", "512", "-o", out,
                                 "--overwrite", "--cache-dir", packed[1], "--no-progress"])
    assert r.exit_code == 2 and name in r.output and "symbolic" in r.output, r.output
    assert os.path.islink(os.path.join(out, name)) and os.readlink(os.path.join(out, name)) == target
    assert kind == "dangling" or open(target, "rb").read() == before


@pytest.mark.parametrize("kind", ["outside", "dangling"])
@pytest.mark.parametrize("name", NAMES)
def test_verify_source_says_a_linked_manifest_is_unusable_not_absent(packed, tmp_path, name, kind):
    out, _ = _linked(packed, tmp_path, name, kind)
    r = CliRunner().invoke(app, ["verify", out, "--source", PEPS, "--cache-dir", packed[1], "-q"])
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    assert "its manifest is unusable" in r.stderr and "no manifest" not in r.stderr, r.stderr
