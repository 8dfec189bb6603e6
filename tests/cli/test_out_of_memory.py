"""A MemoryError ends every subcommand with one line that names the command, the stage it ran
out in (the deepest packtool package in the traceback), its input, and the flags that lower
that stage's memory in that command (or says that none does): the generic "try --workers 1
or a smaller --plan-shard-rows" named flags plan, inspect and train do not have. In-process,
through packtool.cli.main, with its `_leave` stood in (tests/cli_main.py)."""
from __future__ import annotations

import pytest
from cli_main import raiser, run_main
from conftest import GPT2, GSM8K, gsm8k_output


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    return gsm8k_output(tmp_path_factory.mktemp("oom"))


# case -> (argv given the fixture folder, where the work is cut short, the stage's module,
#          what the line must name: input, stage words, the flags or the "no flag" advice)
CASES = {
    "pack tokenizing": (lambda t: ["pack", GSM8K, "--tokenizer", GPT2, "--dry-run", "-q", "--cache-dir", str(t / "c2")],
                        "packtool.packing.tokenize_to_cache", "packtool.tokenize.pipeline",
                        [GSM8K, "while tokenizing", "no pack flag", "JSON Lines"]),
    "pack planning": (lambda t: ["pack", GSM8K, "--tokenizer", GPT2, "--dry-run", "-q", "--cache-dir", str(t / "c")],
                      "packtool.packing.tokenize_to_cache", "packtool.planning.sharded",
                      [GSM8K, "while planning the slabs of", "--plan-shard-rows", "-C"]),
    "pack writing": (lambda t: ["pack", GSM8K, "--tokenizer", GPT2, "-q", "-o", str(t / "o2"), "--cache-dir", str(t / "c")],
                     "packtool.packing.tokenize_to_cache", "packtool.slabs.writer",
                     [GSM8K, "while writing the slabs of", "--workers 1"]),
    "pack, stage unknown": (lambda t: ["pack", GSM8K, "--tokenizer", GPT2, "--dry-run", "-q", "--cache-dir", str(t / "c")],
                            "packtool.packing.tokenize_to_cache", "elsewhere",
                            [GSM8K, "--workers 1", "--plan-shard-rows"]),
    "plan": (lambda t: ["plan", "--lengths", str(t / "l.txt")], "packtool.planning.core.plan",
             "packtool.planning.core", ["l.txt", "while planning", "no plan flag"]),
    "inspect --lengths": (lambda t: ["inspect", "--lengths", str(t / "l.txt"), "-q"],
                          "packtool.inspection.planned.inspect_lengths", "packtool.inspection.planned",
                          ["--lengths", "l.txt", "while inspecting", "no inspect flag"]),
    "inspect a packed output": (lambda t: ["inspect", str(t / "out"), "-q"],
                                "packtool.inspection.packed.inspect_packed", "packtool.slabs.reader",
                                ["out", "while reading the slabs of", "no inspect flag"]),
    "verify": (lambda t: ["verify", str(t / "out"), "-q"], "packtool.verification.run.verify",
               "packtool.verification.shard", ["out", "while checking", "--workers 1"]),
    "verify --source": (lambda t: ["verify", str(t / "out"), "--source", GSM8K, "-q", "--cache-dir", str(t / "c3")],
                        "packtool.verification.source.source_store", "packtool.tokenize.pipeline",
                        ["--source", GSM8K, "while tokenizing", "no verify flag"]),
    "train": (lambda t: ["train", str(t / "out"), "--device", "cpu", "--steps", "1"],
              "packtool.megatron.loop.train", "packtool.megatron.loop",
              ["out", "while training on", "--micro-batch-tokens"]),
}


@pytest.mark.parametrize("case", CASES)
def test_out_of_memory_names_command_stage_input_and_the_flags_that_help(case, packed, monkeypatch, capsys):
    argv, site, module, said = CASES[case]
    argv = argv(packed)
    monkeypatch.setattr(site, raiser(module))
    ended = run_main(monkeypatch, argv)
    stderr = capsys.readouterr().err  # (megatron's import warnings aside: not packtool's lines)
    err = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
    assert ended == [2] and len(err) == 1 and "Traceback" not in stderr, stderr
    line = err[0]
    assert line.startswith(f"error: out of memory in `packtool {argv[0]}`"), line
    assert all(s in line for s in said), (said, line)
    if argv[0] in ("plan", "inspect", "train"):  # flags those commands do not have
        assert "--workers" not in line and "--plan-shard-rows" not in line.split("pack the data")[0], line


# RB-1 (s49 review): pack at --workers 1 (or one core, the default's count) was told to pass
# --workers 1; only verify knew the fix was in force. Every entry whose advice names --workers,
# each command and stage, with one worker given or resolved
def _naming_workers():
    from packtool.cli.memory import _ADVICE
    return [key for key, advice in _ADVICE.items() if "--workers" in advice]


@pytest.mark.parametrize("workers", [1, None], ids=["--workers 1", "one core"])
@pytest.mark.parametrize("key", _naming_workers(), ids=str)
def test_a_run_at_one_worker_is_not_told_to_pass_workers_1(key, workers, monkeypatch):
    from packtool.cli import memory
    command, stage = key
    monkeypatch.setattr(memory, "stage_of", lambda e: stage)
    monkeypatch.setattr("packtool.workers.cores", lambda: 1)
    line = memory.out_of_memory(MemoryError(), command, {"workers": workers, "inputs": ["d.jsonl"], "directory": "o"})
    assert "already (--workers 1)" in line and "try --workers" not in line and "(--workers 1:" not in line, line
    monkeypatch.setattr("packtool.workers.cores", lambda: 8)  # more than one: the advice stands
    line = memory.out_of_memory(MemoryError(), command, {"workers": 4 if workers else None, "inputs": ["d.jsonl"],
                                                         "directory": "o"})
    assert "already" not in line and "--workers 1" in line, line
