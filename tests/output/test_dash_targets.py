"""`-` given to a flag packtool writes, file or folder: `-` is stdin for an input (cli.inputs), and
as a target it made a file or folder named '-' in the working folder (`pack -o -` said "Done: -",
`--cache-dir -` filled a folder '-' with cache entries, exit 0). The file flags were refused at
stop 41; here the class: every path a command writes (cli.path_flags.WRITES, which the CLI's own
empty-value check reads), the cache root's variable and the library's arguments, each refused
by packtool.output (paths.refuse_stdout) in one line naming the flag, exit 2, nothing made."""
from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pytest
from typer.testing import CliRunner

import packtool
from packtool.align import Alignment
from packtool.cli.app import app
from packtool.cli.path_flags import WRITES
from packtool.errors import PacktoolCacheError, PacktoolOutputError

runner = CliRunner()
PACK = ["pack", "toks.jsonl", "-C", "64", "--no-progress"]
TRAIN = ["--device", "cpu", "--layers", "1", "--hidden", "32", "--heads", "2", "--ffn", "64", "--log-every", "0",
         "--steps", "1"]

# (command, parameter) -> (its flag, the command line with `-` for it, what it writes)
CASES = {
    ("pack", "output"): ("--output", [*PACK, "--cache-dir", "cache", "-o", "-"], "folder"),
    ("pack", "cache_dir"): ("--cache-dir", [*PACK, "--cache-dir", "-", "-o", "out"], "folder"),
    ("verify", "cache_dir"): ("--cache-dir", ["verify", "packed", "--source", "toks.jsonl", "--cache-dir", "-"],
                              "folder"),
    ("plan", "output"): ("--output", ["plan", "--lengths", "lengths.npy", "-o", "-"], "file"),
    ("inspect", "html"): ("--html", ["inspect", "packed", "--html", "-"], "file"),
    ("train", "save"): ("--save", ["train", "slabs", *TRAIN, "--save", "-"], "folder"),
    ("train", "json_log"): ("--json-log", ["train", "slabs", *TRAIN, "--json-log", "-"], "file"),
}


def test_every_path_a_command_writes_is_a_case():
    assert set(CASES) == {(c, n) for c, names in WRITES.items() for n in names}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A packed output, its rows, a lengths file and a slab folder train reads (torch's, when there)."""
    root = tmp_path_factory.mktemp("dash")
    with open(root / "toks.jsonl", "w") as f:
        for i in range(40):
            f.write(json.dumps({"input_ids": list(range(1, 8 + i % 5))}) + "\n")
    np.save(root / "lengths.npy", np.arange(1, 60, dtype=np.int64))
    cwd = os.getcwd()
    os.chdir(root)
    try:
        assert runner.invoke(app, [*PACK, "--cache-dir", "cache", "-o", "packed"]).exit_code == 0
    finally:
        os.chdir(cwd)
    return root


@pytest.fixture
def here(built, monkeypatch):
    monkeypatch.chdir(built)
    return built


def _slabs(root, command):
    if command == "train" and not os.path.exists(root / "slabs"):
        pytest.importorskip("megatron.core")
        from megatron_runs import small_slabs
        small_slabs(root / "slabs")


@pytest.mark.parametrize("case", list(CASES), ids=[f"{c} {CASES[(c, n)][0]}" for c, n in CASES])
def test_dash_for_a_written_path_is_one_line_naming_the_flag(here, case):
    flag, args, kind = CASES[case]
    _slabs(here, case[0])
    before = sorted(os.listdir(here))
    r = runner.invoke(app, args)
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.exit_code == 2 and len(errors) == 1 and "Traceback" not in r.output, r.output
    assert f"names standard output, but {flag} writes a {kind}" in errors[0] and "./-" in errors[0], errors
    assert sorted(os.listdir(here)) == before and not os.path.lexists(here / "-")


def test_the_cache_roots_variable_given_dash_is_refused(here, monkeypatch):
    monkeypatch.setenv("PACKTOOL_CACHE_DIR", "-")
    r = runner.invoke(app, [*PACK, "-o", "out"])
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.exit_code == 2 and len(errors) == 1, r.output
    assert "names standard output, but PACKTOOL_CACHE_DIR writes a folder" in errors[0], errors
    assert not os.path.lexists(here / "-") and not os.path.lexists(here / "out")


@pytest.mark.parametrize("argument", ["output", "cache_dir"])
def test_the_librarys_folder_arguments_given_dash_are_refused(here, argument):
    kw = {"output": "out", "cache_dir": "cache", argument: "-"}
    error = PacktoolCacheError if argument == "cache_dir" else PacktoolOutputError  # the argument's kind (place_error)
    with pytest.raises(error, match=f"names standard output, but {argument} writes a folder") as e:
        packtool.pack(pa.table({"input_ids": [[1, 2, 3]]}), alignment=Alignment(capacity=16), **kw)
    assert "\n" not in str(e.value)
    assert not os.path.lexists(here / "-") and not os.path.lexists(here / "out")


def test_dot_slash_dash_is_a_folder_of_that_name(here):
    """The neighbour the line offers: `./-` is a name like any other."""
    r = runner.invoke(app, [*PACK, "--cache-dir", "cache", "-o", "./-"])
    try:
        assert r.exit_code == 0 and os.path.isfile(here / "-" / ".manifest.json"), r.output
    finally:
        import shutil
        shutil.rmtree(here / "-", ignore_errors=True)
