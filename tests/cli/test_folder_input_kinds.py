"""Stranger 31 S31-7: a data file's name in a folder input on something that is not a regular
file (a FIFO, a link to a device, a link to nothing; also in a subfolder) was passed over in
silence, its rows gone from the training data. Every entry that reads a folder input
(readers.resolve_inputs, its one owner) refuses it in one line naming each such file and its
kind, as naming the file directly does."""
from __future__ import annotations

import os

import pytest
from conftest import GPT2, GSM8K
from typer.testing import CliRunner

import packtool
from packtool.cli.app import app
from packtool.errors import PacktoolInputError
from packtool.tokenize import TokenizeConfig, tokenize_to_cache
from packtool.tokenize.readers import resolve_inputs

runner = CliRunner()

KINDS = {  # name in the folder -> how to make it, what the message calls it
    "b.jsonl": (lambda p: os.mkfifo(p), "a FIFO"),
    "c.jsonl": (lambda p: os.symlink("/dev/zero", p), "a character device"),
    "d.jsonl": (lambda p: os.symlink(os.path.join(os.path.dirname(p), "nowhere"), p), "a symbolic link to nothing"),
    "sub/e.parquet": (lambda p: os.mkfifo(p), "a FIFO"),
    "f.jsonl.zst": (lambda p: os.symlink("/dev/null", p), "a character device"),
}


def _folder(tmp_path, names) -> str:
    d = tmp_path / "fd"
    (d / "sub").mkdir(parents=True)
    with open(GSM8K) as f:
        (d / "s.jsonl").write_text("".join(f.readlines()[:10]))
    for n in names:
        KINDS[n][0](str(d / n))
    return str(d)


def _verify_source(folder, tmp_path):
    return runner.invoke(app, ["verify", str(_packed(tmp_path)), "--source", folder, "-q",
                               "--cache-dir", str(tmp_path / "c")])


def _packed(tmp_path):
    good = tmp_path / "good"
    good.mkdir(exist_ok=True)
    with open(GSM8K) as f:
        (good / "s.jsonl").write_text("".join(f.readlines()[:10]))
    r = runner.invoke(app, ["pack", str(good), "--tokenizer", GPT2, "-C", "1024", "-q", "-o",
                            str(tmp_path / "out"), "--cache-dir", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    return tmp_path / "out"


ENTRIES = {
    "resolve_inputs": lambda d, t: resolve_inputs([d]),
    "tokenize_to_cache": lambda d, t: tokenize_to_cache([d], TokenizeConfig(tokenizer=GPT2), str(t / "c"),
                                                        progress=False),
    "library pack": lambda d, t: packtool.pack([d], tokenize=TokenizeConfig(tokenizer=GPT2), dry_run=True,
                                               cache_dir=str(t / "c")),
    "cli pack": lambda d, t: runner.invoke(app, ["pack", d, "--tokenizer", GPT2, "-C", "1024", "--dry-run",
                                                 "-q", "--cache-dir", str(t / "c")]),
    "cli verify --source": _verify_source,
}


def _message(entry, folder, tmp_path) -> str:
    if not entry.startswith("cli"):
        with pytest.raises(PacktoolInputError) as e:
            ENTRIES[entry](folder, tmp_path)
        return str(e.value)
    r = ENTRIES[entry](folder, tmp_path)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), r.output
    return lines[0]


@pytest.mark.parametrize("name", KINDS)
@pytest.mark.parametrize("entry", ENTRIES)
def test_a_folder_input_refuses_a_data_name_on_a_file_it_cannot_read(tmp_path, entry, name):
    folder = _folder(tmp_path, [name])
    message = _message(entry, folder, tmp_path)
    assert folder in message and f"{name} ({KINDS[name][1]}" in message, message


def test_every_such_file_is_named(tmp_path):
    message = _message("resolve_inputs", _folder(tmp_path, list(KINDS)), tmp_path)
    assert all(f"{n} ({k}" in message for n, (_, k) in KINDS.items()), message


def test_names_that_are_not_data_are_still_passed_over(tmp_path):
    folder = _folder(tmp_path, [])
    os.mkfifo(os.path.join(folder, "README"))
    os.symlink("nowhere", os.path.join(folder, ".hidden.jsonl"))
    assert [os.path.basename(f.path) for f in resolve_inputs([folder])] == ["s.jsonl"]
