"""Issue 23 class 6: every public library entry refuses a wrong-typed or out-of-range argument
at its face, through one owner (packtool/params.py), as packtool's error, in one line naming
the argument, before any work (nothing written); numpy integers are integers."""
from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest
from conftest import GPT2, GSM8K

import packtool
from packtool import online
from packtool.errors import PacktoolError

A = packtool.Alignment(capacity=1024)
TOK = packtool.TokenizeConfig(tokenizer=GPT2, prompt_field="question", response_field="answer")


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    root = tmp_path_factory.mktemp("face")
    out = str(root / "out")
    packtool.pack([GSM8K], A, tokenize=TOK, output=out, cache_dir=str(root / "cache"))
    return out


def _pack(**kw):
    def call(d, packed=None):
        args = dict(output=str(d / "out"), cache_dir=str(d / "cache")) | kw
        return packtool.pack([GSM8K], A, tokenize=TOK, **args)
    return call


# entry point -> {bad value's label: (call(tmp_path, packed output), the argument's name)}
CASES = {
    "pack output": (_pack(output=5), "output"),
    "pack output bytes": (_pack(output=b"out"), "output"),
    "pack cache_dir": (_pack(cache_dir=5), "cache_dir"),
    "pack shard_tokens 0": (_pack(shard_tokens=0), "shard_tokens"),
    "pack shard_tokens -5": (_pack(shard_tokens=-5), "shard_tokens"),
    "pack shard_tokens 1.5": (_pack(shard_tokens=1.5), "shard_tokens"),
    "pack shard_tokens 10**30": (_pack(shard_tokens=10**30), "shard_tokens"),
    "pack workers -1": (_pack(workers=-1), "workers"),
    "pack workers 10**9": (_pack(workers=10**9), "workers"),
    "pack plan_shard_rows -1": (_pack(plan_shard_rows=-1), "plan_shard_rows"),
    "pack plan_shard_rows 2.5": (_pack(plan_shard_rows=2.5), "plan_shard_rows"),
    "pack overwrite 'no'": (_pack(overwrite="no"), "overwrite"),
    "pack dry_run 1": (_pack(dry_run=1), "dry_run"),
    "pack progress None": (_pack(progress=None), "progress"),
    "pack split 5": (_pack(split=5), "split"),
    "verify None": (lambda d, o: packtool.verify(None), "directory"),
    "verify 123": (lambda d, o: packtool.verify(123), "directory"),
    "verify batch_rows 0": (lambda d, o: packtool.verify(o, batch_rows=0), "batch_rows"),
    "verify source_dir 5": (lambda d, o: packtool.verify(o, source_dir=5), "source_dir"),
    "verify workers 0": (lambda d, o: packtool.verify(o, workers=0), "workers"),
    "verify workers 2.5": (lambda d, o: packtool.verify(o, workers=2.5), "workers"),
    "verify max_problems -1": (lambda d, o: packtool.verify(o, max_problems=-1), "max_problems"),
    "verify progress 'yes'": (lambda d, o: packtool.verify(o, progress="yes"), "progress"),
    "inspect None": (lambda d, o: packtool.inspect(None), "directory"),
    "SlabManifest.read None": (lambda d, o: packtool.SlabManifest.read(None), "path"),
    "inspect bytes": (lambda d, o: packtool.inspect(os.fsencode(o)), "directory"),
    "inspect compare 'x'": (lambda d, o: packtool.inspect(o, compare="x"), "compare"),
    "inspect_lengths what_if 2": (lambda d, o: packtool.inspect_lengths([5, 6], A, what_if=2), "what_if"),
    "inspect_lengths 'x'": (lambda d, o: packtool.inspect_lengths("x", A), "lengths"),
    "plan None": (lambda d, o: packtool.plan(None, A), "lengths"),
    "plan 'abc'": (lambda d, o: packtool.plan("abc", A), "lengths"),
    "plan 2-D": (lambda d, o: packtool.plan(np.array([[1, 2]]), A), "lengths"),
    "Alignment tp True": (lambda d, o: packtool.Alignment(tp=True), "tp"),
    "Alignment cp 2.0": (lambda d, o: packtool.Alignment(cp=2.0), "cp"),
    "Alignment capacity '4096'": (lambda d, o: packtool.Alignment(capacity="4096"), "capacity"),
    "Alignment fixed_length 1.5": (lambda d, o: packtool.Alignment(fixed_length=1.5), "fixed_length"),
    "Alignment sp 'no'": (lambda d, o: packtool.Alignment(tp=2, sp="no"), "sp"),
    "PackingConfig dp 2.0": (lambda d, o: packtool.PackingConfig(dp=2.0), "dp"),
    "PackingConfig seed -1": (lambda d, o: packtool.PackingConfig(seed=-1), "seed"),
    "PackingConfig algorithm []": (lambda d, o: packtool.PackingConfig(algorithm=[]), "algorithm"),
    "TokenizeConfig tokenizer True": (lambda d, o: packtool.TokenizeConfig(tokenizer=True), "tokenizer"),
    "TokenizeConfig tokenizer 5": (lambda d, o: packtool.TokenizeConfig(tokenizer=5), "tokenizer"),
    "TokenizeConfig text_field 5": (lambda d, o: packtool.TokenizeConfig(text_field=5), "text_field"),
    "TokenizeConfig side_columns 5": (lambda d, o: packtool.TokenizeConfig(side_columns=5), "side_columns"),
    "TokenizeConfig add_eos 'no'": (lambda d, o: packtool.TokenizeConfig(add_eos="no"), "add_eos"),
    "TokenizeConfig batch_size 'a'": (lambda d, o: packtool.TokenizeConfig(batch_size="a"), "batch_size"),
    "online micro_batches alignment None": (lambda d, o: online.micro_batches([5, 6], None, 100), "alignment"),
    "online micro_batches order []": (lambda d, o: online.micro_batches([5, 6], A, 100, order=[]), "order"),
    "online micro_batches order 'x'": (lambda d, o: online.micro_batches([5, 6], A, 100, order="x"), "order"),
    "online make_seq_packer 'ffd'": (lambda d, o: online.make_seq_packer("ffd", 1024), "algorithm"),
    "online make_seq_packer []": (lambda d, o: online.make_seq_packer([], 1024), "algorithm"),
    "online pack_step alignment 5": (lambda d, o: online.pack_step([5, 6], 5), "alignment"),
    "online SeqPacker alignment": (lambda d, o: online.SeqPacker(1024, alignment=packtool.Alignment(capacity=512)), "capacity"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_argument_is_one_line_naming_it_before_any_work(tmp_path, packed, case):
    call, name = CASES[case]
    before = sorted(os.listdir(packed))
    with pytest.raises(PacktoolError) as e:
        call(tmp_path, packed)
    text = str(e.value)
    assert "\n" not in text and name in text, text
    assert os.listdir(tmp_path) == [], "work was done before the argument was refused"
    assert sorted(os.listdir(packed)) == before


def test_numpy_integers_and_pathlike_pack(tmp_path):
    """np.int64 settings are ints (the manifest is JSON), a pathlib.Path is a path."""
    a = packtool.Alignment(tp=np.int64(2), cp=np.int64(2), capacity=np.int64(4096))
    pk = packtool.PackingConfig(dp=np.int32(2), seed=np.uint8(3))
    tok = packtool.TokenizeConfig(tokenizer=pathlib.Path(GPT2), prompt_field="question",
                                  response_field="answer", batch_size=np.int64(64))
    assert type(a.capacity) is int and type(pk.dp) is int and tok.tokenizer == GPT2
    res = packtool.pack([GSM8K], a, pk, tok, output=tmp_path / "out", cache_dir=tmp_path / "cache",
                        shard_tokens=np.int64(1 << 20), workers=np.int64(1), overwrite=np.bool_(False))
    assert res.plan.num_slabs > 0
    assert packtool.verify(tmp_path / "out", workers=np.int64(1)).ok
    assert packtool.inspect(tmp_path / "out").slabs == res.plan.num_slabs


def test_a_missing_output_raises_an_existing_damaged_one_reports(tmp_path, packed):
    """As the CLI's exit 2 for a missing path: a bad argument raises; checks report."""
    with pytest.raises(PacktoolError, match="no such folder"):
        packtool.verify(str(tmp_path / "nonexistent"))
    (tmp_path / "empty").mkdir()
    assert packtool.verify(str(tmp_path / "empty")).ok is False


# the CLI's flags for the same arguments: one range table (params.RANGES), checked by the library
FLAGS = [("pack", "--shard-tokens", "0"), ("pack", "--shard-tokens", str(10**30)), ("pack", "--workers", "0"),
         ("pack", "--workers", str(10**9)), ("pack", "--plan-shard-rows", "-1"),
         ("verify", "--workers", "0"), ("verify", "--max-problems", "-1")]


@pytest.mark.parametrize("command,flag,value", FLAGS)
def test_the_cli_flags_take_the_library_ranges(tmp_path, packed, command, flag, value):
    from typer.testing import CliRunner

    from packtool.cli.app import app
    args = ([GSM8K, "--tokenizer", GPT2, "--prompt-field", "question", "--response-field", "answer",
             "-C", "1024", "-o", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache")]
            if command == "pack" else [packed])
    res = CliRunner().invoke(app, [command, *args, flag, value])
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and flag in lines[0], res.output
    assert os.listdir(tmp_path) == []
