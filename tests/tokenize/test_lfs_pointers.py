"""S46A-11: a repository cloned without git-lfs (`git clone https://huggingface.co/...`) holds a
3-line Git LFS pointer in place of each large file, and every reader called it by its parser's
words (invalid JSON "correct it there", a Parquet without magic bytes, a tokenizer that cannot be
instantiated, a tokenizer_config.json to "fix or remove"). One rule (storage.refuse_lfs_pointer,
asked where an input's kind is checked, output.paths.refuse_special_input, and by read_small for
every settings file): the file is said as a Git LFS pointer, naming it and the fix (`git lfs pull`),
exit 2 in one line. Every door a file comes in by: data files alone and in a folder, `verify
--source`, lengths, a plan file, a tokenizer file or folder, its tokenizer_config.json, a chat
template; the library as the command line."""
from __future__ import annotations

import json
import shutil

import pytest
from conftest import GPT2, MISTRAL_DIR
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.errors import PacktoolError

runner = CliRunner()
POINTER = ("version https://git-lfs.github.com/spec/v1\n"
           "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 12345\n")


def _ptr(path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(POINTER)
    return str(path)


def _rows(tmp):
    p = tmp / "rows.jsonl"
    p.write_text(json.dumps({"text": "Hello world"}) + "\n")
    return str(p)


def _packed(tmp):
    out = str(tmp / "out")
    r = runner.invoke(app, ["pack", _rows(tmp), "--tokenizer", GPT2, "-C", "64", "-o", out,
                            "--cache-dir", str(tmp / "c"), "-q"])
    assert r.exit_code == 0, r.output
    return out


def _tok_folder(tmp):
    d = tmp / "tok2"
    d.mkdir()
    shutil.copy(f"{MISTRAL_DIR}/tokenizer.json", d / "tokenizer.json")
    return d


# door -> (the pointer made, the command given it)
DOORS = {
    **{f"data .{ext}": (lambda t, e=ext: _ptr(t / f"train.{e}"),
                        lambda t, p: ["pack", p, "--tokenizer", GPT2, "-C", "64", "--dry-run", "-q"])
       for ext in ("jsonl", "json", "parquet", "arrow", "csv")},
    **{f"data .{ext} in a folder": (lambda t, e=ext: _ptr(t / "repo" / "data" / f"train.{e}"),
                                    lambda t, p: ["pack", str(t / "repo"), "--tokenizer", GPT2, "-C", "64",
                                                  "--dry-run", "-q"])
       for ext in ("jsonl", "parquet")},
    "verify --source": (lambda t: _ptr(t / "src.jsonl"),
                        lambda t, p: ["verify", _packed(t), "--source", p, "--cache-dir", str(t / "c2"), "-q"]),
    **{f"plan --lengths .{ext}": (lambda t, e=ext: _ptr(t / f"lengths.{e}"),
                                  lambda t, p: ["plan", "--lengths", p, "-C", "64"])
       for ext in ("parquet", "npy", "txt")},
    "inspect --lengths": (lambda t: _ptr(t / "lengths.parquet"), lambda t, p: ["inspect", "--lengths", p]),
    "inspect --plan": (lambda t: _ptr(t / "plan.parquet"), lambda t, p: ["inspect", "--plan", p]),
    "tokenizer file": (lambda t: _ptr(t / "tok" / "tokenizer.json"),
                       lambda t, p: ["pack", _rows(t), "--tokenizer", p, "-C", "64", "--dry-run", "-q"]),
    "tokenizer folder": (lambda t: _ptr(t / "tok" / "tokenizer.json"),
                         lambda t, p: ["pack", _rows(t), "--tokenizer", str(t / "tok"), "-C", "64", "--dry-run", "-q"]),
    "tokenizer_config.json": (lambda t: _ptr(_tok_folder(t) / "tokenizer_config.json"),
                              lambda t, p: ["pack", _rows(t), "--tokenizer", str(t / "tok2"), "-C", "64",
                                            "--dry-run", "-q"]),
    "chat template": (lambda t: _ptr(t / "t.jinja"),
                      lambda t, p: ["pack", _rows(t), "--tokenizer", GPT2, "--chat-template", p, "-C", "64",
                                    "--dry-run", "-q"]),
}


@pytest.mark.parametrize("door", DOORS)
def test_a_git_lfs_pointer_is_said_as_one(tmp_path, door):
    make, cmd = DOORS[door]
    path = make(tmp_path)
    r = runner.invoke(app, cmd(tmp_path, path))
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.exit_code == 2 and len(errors) == 1 and "Traceback" not in r.output, r.output
    line = errors[0]
    assert path in line and "is a Git LFS pointer standing for a file of 12345 bytes" in line, line
    assert "`git lfs pull`" in line, line


@pytest.mark.parametrize("what", ["data", "tokenizer_config.json"])
def test_the_library_says_it_too(tmp_path, what):
    from packtool.align import Alignment
    from packtool.packing import pack
    from packtool.planning.core import PackingConfig
    from packtool.tokenize.config import TokenizeConfig
    if what == "data":
        src, tok = _ptr(tmp_path / "train.jsonl"), GPT2
    else:
        src, tok = _rows(tmp_path), str(_tok_folder(tmp_path))
        _ptr(tmp_path / "tok2" / "tokenizer_config.json")
    with pytest.raises(PacktoolError, match="is a Git LFS pointer") as e:
        pack([src], Alignment(capacity=64), PackingConfig(), TokenizeConfig(tokenizer=tok), dry_run=True,
             cache_dir=str(tmp_path / "c"))
    assert "\n" not in str(e.value)


def test_a_small_file_that_is_no_pointer_reads(tmp_path):
    p = tmp_path / "lengths.txt"
    p.write_text("version 3\n")  # not the pointer's first line: the lengths reader's own words
    r = runner.invoke(app, ["plan", "--lengths", str(p), "-C", "64"])
    assert "Git LFS" not in r.output, r.output
