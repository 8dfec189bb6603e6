"""Every resource is bounded and every input kind is known, tested as classes: each flag with
a size that makes a capacity-sized table is refused with the estimate and the flag before
anything is allocated or tokenized; a FIFO (or other special file) is refused by kind
wherever packtool reads a file, and never blocked on; every PACKTOOL_* value is checked
(`PACKTOOL_DEBUG=false` is off)."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from typer.testing import CliRunner

import packtool.planning.bounds as bounds
from packtool.align import Alignment
from packtool.cli.app import app
from packtool.errors import PacktoolConfigError

runner = CliRunner()


def one_error(args, *needles, env=None):
    r = runner.invoke(app, args, env=env)
    text = r.stdout + r.stderr
    assert r.exit_code == 2, text
    assert "Traceback" not in text, text
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, text
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


@pytest.fixture
def proj(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with open(tmp_path / "toks.jsonl", "w") as f:
        for i in range(20):
            f.write(json.dumps({"input_ids": list(range(1, 6 + i % 4))}) + "\n")
    np.save(tmp_path / "lengths.npy", np.arange(1, 50, dtype=np.int64))
    return tmp_path


# --- sizes ---------------------------------------------------------------------------------

SIZED = {  # flags whose value sizes a table: (extra args, the flag the line must name)
    "-C": (["-C", "100000000"], "--max-tokens 100000000"),
    "--fixed-length": (["-C", "100000000", "--fixed-length", "100000000"], "--fixed-length 100000000"),
    "--workers": (["-C", "4000000", "--workers", "64", "--plan-shard-rows", "0"], "fewer --workers"),
}


@pytest.mark.parametrize("flag", sorted(SIZED))
def test_a_size_that_cannot_fit_is_refused_before_tokenizing(proj, monkeypatch, flag):
    monkeypatch.setattr(bounds, "available_bytes", lambda: 2 * 10**9)  # a 2 GB machine
    extra, needle = SIZED[flag]
    line = one_error(["pack", "toks.jsonl", "-o", "out", "--cache-dir", "cache", "--no-progress", *extra],
                     needle, "GB", "available")
    assert "needs about" in line
    assert not os.path.exists(proj / "cache") and not os.path.exists(proj / "out")


def test_the_planner_checks_too(monkeypatch):
    from packtool.planning.sharded import plan_sharded
    monkeypatch.setattr(bounds, "available_bytes", lambda: 10**9)
    with pytest.raises(PacktoolConfigError, match="capacity=100000000: needs about 5.6 GB"):
        plan_sharded(np.arange(1, 10), Alignment(capacity=100_000_000))


def test_a_size_that_fits_is_not_refused(monkeypatch):
    monkeypatch.setattr(bounds, "available_bytes", lambda: 64 * 10**9)
    bounds.check_capacity(Alignment(capacity=100_000_000), sharded=True, writers=2)


@pytest.mark.parametrize("cmd", ["plan", "inspect"])
def test_a_split_into_more_chunks_than_fit_is_refused_before_allocating(proj, monkeypatch, cmd):
    """One 3e9-token row at -C 16 is 187.5M chunks (~48 GB of plan tables): one line, not
    the OOM killer."""
    np.savetxt(proj / "big.txt", [10, 3_000_000_000], fmt="%d")
    monkeypatch.setattr(bounds, "available_bytes", lambda: 20 * 10**9)
    line = one_error([cmd, "--lengths", "big.txt", "-C", "16", "--overflow", "split"],
                     "--max-tokens 16", "187,500,001 chunks", "3,000,000,000 tokens", "48.0 GB", "--overflow truncate")
    assert "available" in line


def test_a_split_that_fits_is_planned(monkeypatch):
    from packtool.planning.core import PackingConfig, plan
    monkeypatch.setattr(bounds, "available_bytes", lambda: 20 * 10**9)
    p = plan(np.array([10, 100_000]), Alignment(capacity=16), PackingConfig("bfd", overflow="split"))
    assert p.overflow.chunks == 6250


def test_the_format_bound_is_refused_by_every_command(proj):
    for args in (["plan", "--lengths", "lengths.npy"], ["inspect", "--lengths", "lengths.npy"],
                 ["pack", "toks.jsonl", "-o", "out", "--cache-dir", "cache"]):
        one_error([*args, "-C", "2147483648"], "2147483648")
    assert not os.path.exists(proj / "cache")


# --- input kinds ------------------------------------------------------------------------------

FIFO_READS = {
    "pack input": (["pack", "pipe.jsonl", "-o", "out", "--cache-dir", "cache"], None),
    "--lengths": (["plan", "--lengths", "pipe.jsonl"], "--lengths"),
    "inspect --lengths": (["inspect", "--lengths", "pipe.jsonl"], "--lengths"),
    "--plan": (["inspect", "--plan", "pipe.jsonl"], "--plan"),
    "--tokenizer": (["pack", "toks.jsonl", "--tokenizer", "pipe.jsonl", "-o", "out", "--cache-dir",
                     "cache", "--shape", "text"], "--tokenizer"),
}


@pytest.mark.parametrize("what", sorted(FIFO_READS))
@pytest.mark.parametrize("linked", [False, True])
def test_a_fifo_is_refused_by_kind_not_blocked_on(proj, what, linked):
    os.mkfifo(proj / ("real.fifo" if linked else "pipe.jsonl"))
    if linked:
        os.symlink(proj / "real.fifo", proj / "pipe.jsonl")
    args, flag = FIFO_READS[what]
    line = one_error(args, "pipe.jsonl", "FIFO")
    assert flag is None or flag in line


def test_a_fifo_glob_match_is_refused(proj):
    os.mkfifo(proj / "b.jsonl")
    one_error(["pack", "*.jsonl", "-o", "out", "--cache-dir", "cache"], "b.jsonl", "FIFO")


def test_verify_source_fifo_is_refused(proj):
    os.mkfifo(proj / "pipe.jsonl")
    r = runner.invoke(app, ["pack", "toks.jsonl", "-o", "out", "--cache-dir", "cache", "-C", "64",
                            "--no-progress"])
    assert r.exit_code == 0, r.stdout + r.stderr
    one_error(["verify", "out", "--source", "pipe.jsonl", "--cache-dir", "cache"], "pipe.jsonl", "FIFO")


# --- environment values -----------------------------------------------------------------------

@pytest.mark.parametrize("var,value", [
    ("PACKTOOL_TEMPLATE_SECONDS", "abc"), ("PACKTOOL_TEMPLATE_SECONDS", "-5"),
    ("PACKTOOL_TEMPLATE_SECONDS", "nan"), ("PACKTOOL_TEMPLATE_SECONDS", "inf"),
    ("PACKTOOL_TEMPLATE_SECONDS", "0"), ("PACKTOOL_DEBUG", "maybe"), ("PACKTOOL_FUSED", "2"),
    ("PACKTOOL_FP8_QUANT", "cuda"), ("PACKTOOL_FP8_TRANSPOSE", "fast"),
])
def test_a_bad_environment_value_is_one_line_naming_it(proj, var, value):
    one_error(["plan", "--lengths", "lengths.npy"], f"{var}={value!r}", env={var: value})


@pytest.mark.parametrize("value", ["false", "0", "no", "off", "OFF", ""])
def test_packtool_debug_off_values_mean_off(proj, monkeypatch, value):
    import packtool.planning.lengths as lengths

    def boom(*a, **k):
        raise RuntimeError("a bug")
    monkeypatch.setattr(lengths, "load_lengths", boom)
    r = runner.invoke(app, ["plan", "--lengths", "lengths.npy"], env={"PACKTOOL_DEBUG": value})
    assert r.exit_code == 3 and "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr


def test_packtool_debug_on_shows_the_traceback(proj, monkeypatch):
    import packtool.planning.lengths as lengths

    def boom(*a, **k):
        raise RuntimeError("a bug")
    monkeypatch.setattr(lengths, "load_lengths", boom)
    r = runner.invoke(app, ["plan", "--lengths", "lengths.npy"], env={"PACKTOOL_DEBUG": "yes"})
    assert r.exit_code == 3 and "Traceback" in r.stdout + r.stderr


def test_template_seconds_is_read_when_used(monkeypatch):
    import packtool.tokenize.template_limits as template_limits
    monkeypatch.setenv("PACKTOOL_TEMPLATE_SECONDS", "7.5")
    assert template_limits.render_seconds() == 7.5
    monkeypatch.setenv("PACKTOOL_TEMPLATE_SECONDS", "nan")
    with pytest.raises(PacktoolConfigError, match="PACKTOOL_TEMPLATE_SECONDS"):
        template_limits.render_seconds()


@pytest.mark.parametrize("value,on", [("false", False), ("off", False), ("0", False), ("true", True), ("1", True)])
def test_the_fp8_kernels_read_packtool_fused_as_every_module_does(monkeypatch, value, on):
    # kernels/fp8.py read it as `!= "0"`: PACKTOOL_FUSED=false compiled (the kernels moved under
    # packtool/ and the variable sweep of tests/engines/test_no_test_hooks.py reached them)
    pytest.importorskip("torch")
    from packtool.kernels import fp8
    monkeypatch.setenv("PACKTOOL_FUSED", value)
    assert fp8._compile_on() is on


@pytest.mark.parametrize("var,value,expect", [("PACKTOOL_FP8_QUANT", " Compiled ", "compiled"),
                                              ("PACKTOOL_FP8_QUANT", "", "triton"),
                                              ("PACKTOOL_FP8_TRANSPOSE", "COPY", "copy")])
def test_the_fp8_choices_are_read_by_env(monkeypatch, var, value, expect):
    from packtool.env import FP8_QUANT, FP8_TRANSPOSE, env_choice
    monkeypatch.setenv(var, value)
    assert env_choice(*(FP8_QUANT if var.endswith("QUANT") else FP8_TRANSPOSE)) == expect
