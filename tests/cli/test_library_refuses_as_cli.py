"""Checks the command line made and the library did not: `Alignment(capacity=64, fixed_length=128)`
was accepted (the fixed length silently won over the capacity), as were a TokenizeConfig whose
forced shape ignores its field arguments, an empty side or support column name (dropped without
a word), a TrainConfig device or LM head packtool has no code for (another device trained on
the CPU), and slabs packed for another layout than `train` runs (tp, cp, fp8). Each check now lives in the library's own class, so both faces refuse: the library
with packtool's error naming the argument, the command line with the flag, exit 2 as before."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from packtool.align import Alignment
from packtool.cli.app import app
from packtool.errors import EXIT_USAGE, PacktoolError
from packtool.tokenize.config import TokenizeConfig

runner = CliRunner()
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def _lengths(tmp) -> str:
    np.save(tmp / "l.npy", np.array([10, 20, 30]))
    return str(tmp / "l.npy")


def _rows(tmp) -> str:
    (tmp / "x.jsonl").write_text(json.dumps({"text": "hello", "q": "2+2?", "a": "4", "f": [1]}) + "\n")
    return str(tmp / "x.jsonl")


def _pack(tmp, *flags):
    return ["pack", _rows(tmp), "-C", "64", "-o", str(tmp / "out"), "--cache-dir", str(tmp / "cache"), *flags]


def _train_config(data_dir="packed", **kw):
    pytest.importorskip("megatron.core", reason="the train extra is not installed")
    from packtool.megatron.loop import TrainConfig
    return TrainConfig(data_dir=data_dir, **kw)


def _packed(tmp) -> str:  # slabs for tp=1 cp=1, as `pack` wrote them
    import packtool
    if not (tmp / "slabs").exists():
        (tmp / "ids.jsonl").write_text("".join(json.dumps({"input_ids": list(range(1, 2 + i))}) + "\n" for i in range(6)))
        packtool.pack([str(tmp / "ids.jsonl")], Alignment(capacity=64), output=str(tmp / "slabs"),
                      cache_dir=str(tmp / "cache"))
    return str(tmp / "slabs")


def _train(tmp, **kw):
    from packtool.megatron.loop import train
    train(_train_config(_packed(tmp), device="cpu", **kw))


# case -> (library call, what its message names, command line (tmp), the flag its line names)
CASES = {
    "fixed_length over capacity": (lambda t: Alignment(capacity=64, fixed_length=128), "fixed_length=128",
                                   lambda t: ["plan", "--lengths", _lengths(t), "-C", "64", "--fixed-length", "128"],
                                   "--fixed-length 128"),
    "fixed_length over capacity (pack)": (lambda t: Alignment(capacity=64, fixed_length=128), "capacity=64",
                                          lambda t: _pack(t, "--fixed-length", "128"), "--max-tokens 64"),
    "fixed_length over capacity (inspect)": (lambda t: Alignment(capacity=64, fixed_length=128), "capacity=128",
                                             lambda t: ["inspect", "--lengths", _lengths(t), "-C", "64",
                                                        "--fixed-length", "128"], "--max-tokens 128"),
    "shape ignores prompt_field": (lambda t: TokenizeConfig(shape="text", prompt_field="q", response_field="a"),
                                   "prompt_field",
                                   lambda t: _pack(t, "--shape", "text", "--prompt-field", "q", "--response-field", "a"),
                                   "--prompt-field"),
    "shape ignores text_field": (lambda t: TokenizeConfig(shape="tokens", text_field="text"), "text_field",
                                 lambda t: _pack(t, "--shape", "tokens", "--text-field", "text"), "--text-field"),
    "side_columns empty name": (lambda t: TokenizeConfig(side_columns="f,"), "side_columns",
                                lambda t: _pack(t, "--side-columns", "f,"), "--side-columns"),
    "side_columns empty DTYPE": (lambda t: TokenizeConfig(side_columns="f:"), "DTYPE is empty",
                                 lambda t: _pack(t, "--side-columns", "f:"), "--side-columns"),
    "side_columns blank DTYPE": (lambda t: TokenizeConfig(side_columns=("f: ",)), "DTYPE is empty",
                                 lambda t: _pack(t, "--side-columns", "g,f: "), "--side-columns"),
    "support_columns empty name": (lambda t: TokenizeConfig(support_columns=["f", ""]), "support_columns",
                                   lambda t: _pack(t, "--support-columns", ",f"), "--support-columns"),
    "train device": (lambda t: _train_config(device="tpu"), "device",
                     lambda t: ["train", str(t), "--device", "tpu"], "--device"),
    "train lm_head": (lambda t: _train_config(lm_head="triton"), "lm_head",
                      lambda t: ["train", str(t), "--device", "cpu", "--lm-head", "triton"], "--lm-head"),
    "train layout": (lambda t: _train(t, cp=2), "(tp=1, cp=1, fp8='none')",
                     lambda t: ["train", _packed(t), "--device", "cpu", "--cp", "2"], "--cp 1"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_library_refuses_naming_its_argument(tmp_path, case):
    call, needle, _, _ = CASES[case]
    with pytest.raises(PacktoolError) as e:
        call(tmp_path)
    msg = str(e.value)
    assert needle in msg and not FLAG.search("".join(msg.split("`")[0::2])), msg  # a `quoted command` may
    assert "\n" not in msg


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_command_line_refuses_naming_its_flag(tmp_path, case):
    _, _, argv, flag = CASES[case]
    r = runner.invoke(app, argv(tmp_path))
    assert r.exit_code == EXIT_USAGE, r.stdout + r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("error: ") and flag in line, line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("spec", ["x:", "x: ", "y,x:"])
def test_an_empty_dtype_pin_is_refused_not_read_as_the_bare_name(tmp_path, spec):
    """S39-9: `--side-columns 'x:'` packed as plain `x` (exit 0) where `x:FLOAT32` is refused."""
    rows = [{"input_ids": [1, 2, 3], "x": [0.5, 0.25, 0.125], "y": [1, 2, 3]},
            {"input_ids": [4, 5], "x": [1.0, 2.0], "y": [4, 5]}]
    (tmp_path / "rl.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["pack", str(tmp_path / "rl.jsonl"), "-C", "64", "-o", str(tmp_path / "out"), "--cache-dir",
            str(tmp_path / "cache"), "-q", "--side-columns"]
    r = runner.invoke(app, [*argv, spec])
    assert r.exit_code == EXIT_USAGE, r.stdout + r.stderr
    line = r.stderr.strip().splitlines()
    assert len(line) == 1 and line[0].startswith("error: --side-columns") and "DTYPE is empty" in line[0], line
    assert not (tmp_path / "out").exists()
    assert runner.invoke(app, [*argv, spec.replace(":", "").strip()]).exit_code == 0  # the bare name packs
