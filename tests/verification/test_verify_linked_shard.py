"""S34-8: verify said OK, with no word, for an output whose shard is a symbolic link (to a file
outside the folder), which `pack --overwrite` refuses to replace. S35: verify holds the readers' rule
(slabs/open_rules.linked_shard): a link out of the folder, to nothing or to what is no regular file is
a problem naming where it points, as every reader refuses it; a link to a file inside the folder reads
that file (OK) and is said in a note naming it and where it points: absolute or relative, first or
last shard. L4: such a link was called `shard_missing` although the file is there: its check is
`shard_link` (what it is, in the link rule's words), in the library's report and the CLI's lines and
--json alike. tests/slabs/test_consumers_refuse.py holds every consumer to the same answer.
"""
from __future__ import annotations

import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from packtool.align import Alignment
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig
from packtool.verification.run import verify


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    d = tmp_path_factory.mktemp("linked")
    rng = np.random.default_rng(3)
    ids = [rng.integers(1, 900, int(m)).tolist() for m in rng.integers(4, 30, 200)]
    pq.write_table(pa.table({"input_ids": pa.array(ids, pa.list_(pa.int32()))}), d / "in.parquet")
    out = d / "out"
    pack([str(d / "in.parquet")], Alignment(capacity=64), PackingConfig("bfd"), TokenizeConfig(shape="tokens"),
         output=str(out), cache_dir=str(d / "cache"), shard_tokens=1024)
    shards = sorted(n for n in os.listdir(out) if n.endswith(".parquet"))
    assert len(shards) >= 2
    return out, shards


LINKS = {
    "outside, absolute": lambda out, f: (out.parent / "kept" / f, str(out.parent / "kept" / f)),
    "outside, relative": lambda out, f: (out.parent / "kept" / f, os.path.join("..", "kept", f)),
    "inside the folder": lambda out, f: (out / f".{f}.real", f".{f}.real"),
}
# each link the readers refuse -> (what the link is made to, what the message says of it)
REFUSED = {"outside, absolute": "outside the output folder", "outside, relative": "outside the output folder",
           "dangling": "a dangling link", "to a folder": "not a regular file"}


def _linked(out, shards, tmp_path, which, how):
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    f = shards[0] if which == "first" else shards[-1]
    real, link = LINKS[how](copy, f)
    real.parent.mkdir(exist_ok=True)
    os.replace(copy / f, real)
    os.symlink(link, copy / f)
    return copy, f, real


@pytest.mark.parametrize("how", list(LINKS))
@pytest.mark.parametrize("which", ["first", "last"])
def test_a_linked_shard_is_said(packed, tmp_path, which, how):
    out, shards = packed
    copy, f, real = _linked(out, shards, tmp_path, which, how)
    report = verify(str(copy))
    said = [n for n in report.notes if f"shard {f} is a symbolic link" in n]
    if how.startswith("outside"):  # the readers refuse it: a problem, not a note
        assert not report.ok and not said, report.notes
        assert [p.check for p in report.problems] == ["shard_link"], report.problems
        msg = report.problems[0].message
        assert f"shard {f} is a symbolic link to {real}" in msg and "outside the output folder" in msg, msg
        return
    assert report.ok, report.problems  # the slabs are right: readers read the folder's own file
    assert len(said) == 1 and str(real) in said[0] and "pack --overwrite" in said[0]
    assert not [n for n in report.notes if "symbolic link" in n and n not in said]


def test_plain_shards_say_nothing(packed):
    out, _ = packed
    assert not [n for n in verify(str(out)).notes if "symbolic link" in n]


def _refused_link(out, shards, tmp_path, which, how):
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    f = shards[0] if which == "first" else shards[-1]
    if how.startswith("outside"):
        real, link = LINKS[how](copy, f)
        real.parent.mkdir(exist_ok=True)
        os.replace(copy / f, real)
    else:
        real = tmp_path / "gone" if how == "dangling" else copy / ".a-folder"  # a folder inside: no shard
        if how == "to a folder":
            real.mkdir()
        link = str(real)
        os.remove(copy / f)
    os.symlink(link, copy / f)
    return copy, f, real


@pytest.mark.parametrize("place", ["library", "cli", "cli --json"])
@pytest.mark.parametrize("how", list(REFUSED))
@pytest.mark.parametrize("which", ["first", "last"])
def test_a_refused_link_is_said_as_a_link_not_a_missing_shard(packed, tmp_path, which, how, place):
    import json

    from typer.testing import CliRunner

    from packtool.cli.app import app
    out, shards = packed
    copy, f, real = _refused_link(out, shards, tmp_path, which, how)
    if place == "library":
        report = verify(str(copy), workers=1)
        problems = [(p.check, p.message) for p in report.problems]
        notes = report.notes
    else:
        r = CliRunner().invoke(app, ["verify", str(copy), "--workers", "1", *(["--json"] if "json" in place else [])])
        assert r.exit_code == 1 and "Traceback" not in r.output, r.output
        if "json" in place:
            d = json.loads(r.stdout)
            problems, notes = [(p["check"], p["message"]) for p in d["problems"]], d["notes"]
        else:
            lines = [ln for ln in r.stdout.splitlines() if ln.startswith("✗")]
            problems = [(ln.split()[1], ln) for ln in lines]
            notes = [r.stderr]
    assert [c for c, _ in problems] == ["shard_link"], problems
    msg = problems[0][1]
    assert f"{f} is a symbolic link to {real}" in msg and REFUSED[how] in msg, msg
    assert any("a link the readers refuse" in n for n in notes), notes
