"""S46A-13: the same rows under two names among the inputs (a `cp` copy in a folder, `X` beside
the `X.gz` / `X.zst` / `X.bz2` a compressor that keeps its source leaves) were all read, the
rows packed two or three times, rc 0, no note (one file by two names is refused; two files with
the same rows were not said). A copy may be an upsample, so each is one note naming the pair,
from the digests the cache key computes anyway (request.resolve_cache, every route's one door),
on a first run and on a reused cache alike."""
from __future__ import annotations

import bz2
import gzip
import os
import shutil

import pyarrow as pa
import pytest
from conftest import GPT2, GSM8K
from typer.testing import CliRunner

import packtool
from packtool import notes
from packtool.cli.app import app
from packtool.storage import locate
from packtool.tokenize import TokenizeConfig, tokenize_to_cache

runner = CliRunner()


def _zst(src, dst):
    with open(src, "rb") as f, pa.CompressedOutputStream(dst, "zstd") as out:
        out.write(f.read())


COPIES = {  # how the second name was made from d/train.jsonl -> (its name, what the note says)
    "cp copy": ("train_copy.jsonl", lambda s, d: shutil.copy(s, d), "has the same bytes as"),
    "gzip -k": ("train.jsonl.gz", lambda s, d: open(d, "wb").write(gzip.compress(open(s, "rb").read())),
                "is named as a compressed copy of"),
    "zstd": ("train.jsonl.zst", _zst, "is named as a compressed copy of"),
    "bzip2 -k": ("train.jsonl.bz2", lambda s, d: open(d, "wb").write(bz2.compress(open(s, "rb").read())),
                 "is named as a compressed copy of"),
}


def _cli(specs, t):
    r = runner.invoke(app, ["pack", *specs, "--tokenizer", GPT2, "-C", "1024", "--dry-run", "-q",
                            "--cache-dir", str(t / "v")])
    assert r.exit_code == 0, r.output
    assert "packed twice" in r.stderr, r.stderr


ENTRIES = {
    "library pack": lambda specs, t: packtool.pack(specs, tokenize=TokenizeConfig(tokenizer=GPT2), dry_run=True,
                                                   cache_dir=str(t / "v")).summary.sequences == 20
    or pytest.fail("rows"),
    "tokenize_to_cache": lambda specs, t: tokenize_to_cache(specs, TokenizeConfig(tokenizer=GPT2), str(t / "v"),
                                                            progress=False).num_rows == 20 or pytest.fail("rows"),
    "cli pack": _cli,
}


def _inputs(tmp_path, copy, place, request):
    d = tmp_path / "d"
    d.mkdir()
    with open(GSM8K) as f:
        (d / "train.jsonl").write_text("".join(f.readlines()[:10]))
    name, make, _ = COPIES[copy]
    make(str(d / "train.jsonl"), str(d / name))
    if place == "folder":
        return [str(d)], str(d / "train.jsonl"), str(d / name)
    if place == "files":
        return [str(d / "train.jsonl"), str(d / name)], str(d / "train.jsonl"), str(d / name)
    s3 = request.getfixturevalue("s3")
    for n in os.listdir(d):
        locate(f"{s3}/d/{n}").write_bytes((d / n).read_bytes())
    return [f"{s3}/d"], f"{s3}/d/train.jsonl", f"{s3}/d/{name}"


@pytest.mark.parametrize("place", ["folder", "files", "store prefix"])
@pytest.mark.parametrize("copy", COPIES)
@pytest.mark.parametrize("entry", ENTRIES)
def test_the_same_rows_under_two_names_are_said_once_each_run(request, tmp_path, entry, copy, place):
    specs, first, second = _inputs(tmp_path, copy, place, request)
    for run in ("first", "reused cache"):
        start = notes.mark()
        ENTRIES[entry](specs, tmp_path)
        heard = [n for n in notes.since(start) if "packed twice" in n]
        assert len(heard) == 1, (run, notes.since(start))
        assert heard[0].startswith(f"{second} {COPIES[copy][2]} {first}") and "upsample" in heard[0], heard[0]


def test_different_rows_are_not_said(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    with open(GSM8K) as f:
        lines = f.readlines()
    (d / "a.jsonl").write_text("".join(lines[:10]))
    (d / "b.jsonl").write_text("".join(lines[10:20]))
    (d / "c.jsonl.gz").write_bytes(gzip.compress("".join(lines[:10]).encode()))  # no c.jsonl beside it
    start = notes.mark()
    packtool.pack([str(d)], tokenize=TokenizeConfig(tokenizer=GPT2), dry_run=True, cache_dir=str(tmp_path / "v"))
    assert not [n for n in notes.since(start) if "packed twice" in n], notes.since(start)
