"""Issue 23 class 7: `verify OUT --source X` of an output with a damaged manifest exited 2 (the
source's tokenization was read from the manifest first and failed), while `verify OUT` exited
1. Verify's contract: a rejected output is exit 1. Every damage verify finds gives the same exit
and names the same problem with or without --source."""
from __future__ import annotations

import json
import os
import shutil

import pytest
from typer.testing import CliRunner

from packtool.align import Alignment
from packtool.cli.app import app
from packtool.packing import pack
from packtool.slabs.names import MANIFEST

runner = CliRunner()


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    root = tmp_path_factory.mktemp("clean")
    src = root / "src.jsonl"
    src.write_text("".join(json.dumps({"input_ids": list(range(1, 3 + i % 7))}) + "\n" for i in range(40)))
    out = str(root / "packed")
    pack([str(src)], Alignment(capacity=32), output=out, cache_dir=str(root / "cache"), shard_tokens=256)
    return out, str(src)


def _manifest(out):
    with open(os.path.join(out, MANIFEST)) as f:
        return json.load(f)


def _save(out, man):
    with open(os.path.join(out, MANIFEST), "w") as f:
        json.dump(man, f)


def _text(body):
    def damage(out):
        with open(os.path.join(out, MANIFEST), "w") as f:
            f.write(body)
    return damage


def _edit(fn):
    def damage(out):
        man = _manifest(out)
        fn(man)
        _save(out, man)
    return damage


def _shard(fn):
    def damage(out):
        name = sorted(n for n in os.listdir(out) if n.endswith(".parquet"))[0]
        fn(os.path.join(out, name))
    return damage


def _flip(path):
    b = bytearray(open(path, "rb").read())
    b[len(b) // 2] ^= 0xFF
    open(path, "wb").write(bytes(b))


DAMAGES = {
    "manifest missing": lambda out: os.remove(os.path.join(out, MANIFEST)),
    "manifest not json": _text("{not json"),
    "manifest a list": _text("[1, 2]"),
    "manifest empty": _text(""),
    "schema version unknown": _edit(lambda m: m.update(schema_version=999)),
    "alignment gone": _edit(lambda m: m["config"].pop("alignment")),
    "shards not a list": _edit(lambda m: m.update(shards=5)),
    "input not an object": _edit(lambda m: m.update(input=5)),
    "tokenize record not an object": _edit(lambda m: m["input"].update(tokenize=[1])),
    "tokenize record bad shape": _edit(lambda m: m["input"]["tokenize"].update(shape="nonsense")),
    "tokenizer block not an object": _edit(lambda m: m.update(tokenizer=3)),
    "shard missing": _shard(os.remove),
    "shard flipped": _shard(_flip),
    "stray file": lambda out: open(os.path.join(out, "stray.parquet"), "wb").write(b"x"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_output_exits_1_with_or_without_source(clean, tmp_path, damage):
    out = str(tmp_path / "packed")
    shutil.copytree(clean[0], out)
    DAMAGES[damage](out)
    alone = runner.invoke(app, ["verify", out, "--json", "--cache-dir", str(tmp_path / "c")])
    both = runner.invoke(app, ["verify", out, "--source", clean[1], "--json", "--cache-dir", str(tmp_path / "c")])
    assert (alone.exit_code, both.exit_code) == (1, 1), (alone.output, both.output)
    checks = [{p["check"] for p in json.loads(r.stdout)["problems"]} for r in (alone, both)]
    assert checks[0] and checks[0] <= checks[1], checks
