"""S46A-8: a Spark/Hadoop output folder's `_temporary/` (FileOutputCommitter's scratch: task
attempts of a job that failed, was killed or is still writing) was read as data, locally and on
a store: the part file and its attempt's copy both packed, rows twice, no note. Every
folder-expanding route (readers.resolve_inputs through own_trees, their one owner) passes it
over with one note naming it; a `_temporary` folder named itself is read as asked."""
from __future__ import annotations

import os
import re

import pytest
from conftest import GPT2, GSM8K
from typer.testing import CliRunner

import packtool
from packtool import notes
from packtool.cli.app import app
from packtool.storage import locate
from packtool.tokenize import TokenizeConfig, tokenize_to_cache
from packtool.tokenize.readers import resolve_inputs

runner = CliRunner()
ATTEMPT = "_temporary/0/_temporary/attempt_202612041200_0001_m_000000_0"
PART = "part-00000-abc.jsonl"


def _folder(tmp_path) -> str:
    d = tmp_path / "spk"
    (d / ATTEMPT).mkdir(parents=True)
    with open(GSM8K) as f:
        rows = "".join(f.readlines()[:10])
    (d / PART).write_text(rows)
    (d / ATTEMPT / PART).write_text(rows)
    (d / "_temporary" / "0" / "_started_1").write_text("")  # a committer marker: no data name
    return str(d)


def _cli(args):
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "_temporary" in r.stderr, r.stderr


ENTRIES = {  # every reader of a folder input; each must read the 10 committed rows once
    "resolve_inputs": lambda spec, t: [os.path.basename(f.path) for f in resolve_inputs([spec])] == [PART]
    or pytest.fail("files"),
    "tokenize_to_cache": lambda spec, t: tokenize_to_cache([spec], TokenizeConfig(tokenizer=GPT2), str(t / "v"),
                                                           progress=False).num_rows == 10 or pytest.fail("rows"),
    "library pack": lambda spec, t: packtool.pack([spec], tokenize=TokenizeConfig(tokenizer=GPT2), dry_run=True,
                                                  cache_dir=str(t / "v")).summary.sequences == 10
    or pytest.fail("rows"),
    "cli pack": lambda spec, t: _cli(["pack", spec, "--tokenizer", GPT2, "-C", "1024", "-q", "-o", str(t / "o"),
                                      "--cache-dir", str(t / "v")]),
    "cli verify --source": lambda spec, t: _verify(spec, t),
}


def _verify(spec, t):
    """An output of the committed part alone; --source then names the folder (or glob)."""
    one = spec.split("*")[0].rstrip("/")
    r = runner.invoke(app, ["pack", f"{one}/{PART}", "--tokenizer", GPT2, "-C", "1024", "-q", "-o", str(t / "o"),
                            "--cache-dir", str(t / "v")])
    assert r.exit_code == 0, r.output
    _cli(["verify", str(t / "o"), "--source", spec, "-q", "--cache-dir", str(t / "v")])


PLACES = ["folder", "glob", "store prefix", "store glob"]


def _spec(place, folder, s3) -> str:
    if place.startswith("store"):
        for root, _, files in os.walk(folder):
            for n in files:
                rel = os.path.relpath(os.path.join(root, n), folder)
                locate(f"{s3}/spk/{rel}").write_bytes(open(os.path.join(root, n), "rb").read())
        folder = f"{s3}/spk"
    return folder + ("/**/*.jsonl" if place.endswith("glob") else "")


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("entry", ENTRIES)
def test_a_jobs_temporary_folder_is_passed_over_with_a_note(request, tmp_path, entry, place):
    s3 = request.getfixturevalue("s3") if place.startswith("store") else None
    spec = _spec(place, _folder(tmp_path), s3)
    start = notes.mark()
    ENTRIES[entry](spec, tmp_path)
    heard = [n for n in notes.since(start) if "_temporary" in n]
    assert len(heard) == 1, notes.since(start)  # once, though verify --source resolves twice
    assert re.match(re.escape(spec) + r": passed over \d+ files? in Spark/Hadoop `_temporary/` folders", heard[0])
    assert os.path.join(spec.split("/**")[0], "_temporary (") in heard[0], heard[0]


@pytest.mark.parametrize("store", [False, True], ids=["folder", "store prefix"])
def test_a_temporary_folder_named_itself_is_read_as_asked(request, tmp_path, store):
    folder = _folder(tmp_path)
    spec = f"{_spec('store prefix', folder, request.getfixturevalue('s3'))}" if store else folder
    start = notes.mark()
    files = resolve_inputs([f"{spec}/_temporary"])
    assert [os.path.basename(f.path) for f in files] == [PART] and not notes.since(start)


def test_a_folder_of_nothing_but_a_jobs_scratch_says_so(tmp_path):
    folder = _folder(tmp_path)
    os.remove(os.path.join(folder, PART))
    with pytest.raises(packtool.PacktoolError) as e:
        resolve_inputs([folder])
    assert "Spark/Hadoop `_temporary/`" in str(e.value), str(e.value)
