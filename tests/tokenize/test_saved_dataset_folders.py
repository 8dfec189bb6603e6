"""`datasets.save_to_disk` folders as inputs (S41-3): an empty one ("no input files given" for a
folder the user gave), a one-split folder with --split (datasets' own "use load_from_disk" fix,
blamed on --config), a DatasetDict folder with a split it lacks or with --config: each one line
naming the folder (and the flag at fault), exit 2, through the CLI and the library; a
DatasetDict folder with --split reads that split's folder."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from packtool.align import Alignment
from packtool.cli.app import app
from packtool.errors import PacktoolInputError
from packtool.tokenize.config import TokenizeConfig

datasets = pytest.importorskip("datasets")


@pytest.fixture
def folders(tmp_path):
    train = datasets.Dataset.from_dict({"input_ids": [[1, 2, 3]] * 6})
    dd = datasets.DatasetDict({"train": train, "test": datasets.Dataset.from_dict({"input_ids": [[4, 5]] * 2})})
    dd.save_to_disk(str(tmp_path / "dd"))
    train.save_to_disk(str(tmp_path / "one"))
    train.select([]).save_to_disk(str(tmp_path / "empty"))
    return tmp_path


# (input folder, split, config, words in the line, flag)
CASES = {
    "empty folder": ("empty", None, None, "holding no rows", None),
    "empty folder with --split": ("empty", "train", None, "one split", "--split"),
    "split folder with --split": ("dd/train", "train", None, "one split (it is read as itself); drop", "--split"),
    "one-split folder with --split": ("one", "train", None, "drop", "--split"),
    "DatasetDict, split it lacks": ("dd", "nope", None, "no split 'nope'; its splits: test, train", "--split"),
    "DatasetDict with --config": ("dd", "train", "x", "no configurations", "--config"),
}


def _args(folders, name):
    d, split, config, _, _ = CASES[name]
    return str(folders / d), split, config


@pytest.mark.parametrize("name", sorted(CASES))
def test_cli_one_line(folders, tmp_path, name):
    path, split, config = _args(folders, name)
    extra = (["--split", split] if split else []) + (["--config", config] if config else [])
    r = CliRunner().invoke(app, ["pack", path, "-C", "64", "--dry-run", "--json", "--cache-dir",
                                 str(tmp_path / "cache"), *extra])
    assert r.exit_code == 2, r.output
    err = json.loads(r.output.strip().splitlines()[-1])["error"]
    assert CASES[name][3] in err["message"] and "load_from_disk" not in err["message"], err
    assert err["path"] == path and err["flag"] == CASES[name][4], err


@pytest.mark.parametrize("name", sorted(CASES))
def test_library_one_line(folders, tmp_path, name):
    from packtool import pack
    path, split, config = _args(folders, name)
    if config is not None:
        pytest.skip("the library's pack takes no config= (a DatasetDict is loaded by the caller)")
    with pytest.raises(PacktoolInputError) as e:
        pack([path], Alignment(capacity=64), tokenize=TokenizeConfig(), dry_run=True, split=split,
             cache_dir=str(tmp_path / "cache"))
    assert CASES[name][3] in str(e.value), str(e.value)


def test_datasetdict_folder_with_split_reads_that_split(folders, tmp_path):
    r = CliRunner().invoke(app, ["pack", str(folders / "dd"), "--split", "test", "-C", "64", "--dry-run", "--json",
                                 "--cache-dir", str(tmp_path / "cache")])
    assert r.exit_code == 0, r.output
    assert '"sequences": 2' in r.output.replace(" ", "").replace('"sequences":2', '"sequences": 2'), r.output
