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


# RB-7: the one-worker advice was judged by --workers / cores(), not by the workers the run had:
# min(shards, workers) writer threads, min(workers, pieces) verify processes. A one-shard pack (or
# a one-piece verify) at the default --workers on more than one core ran one and was told to pass
# --workers 1. Every stage whose advice names --workers, through the CLI, on two cores.
def _rows(tmp_path):
    import json
    with open(tmp_path / "rows.jsonl", "w") as f:
        for i in range(6):
            f.write(json.dumps({"input_ids": list(range(1, 8 + i)), "loss_mask": [1] * (7 + i)}) + "\n")


RAN_ONE = {  # run -> (what fails, in which module, argv in tmp_path)
    "pack, one shard": (("packtool.slabs.writer.write_shard_file", "packtool.slabs.routed.write_shard_file"),
                        "packtool.slabs.writer",
                        ["pack", "rows.jsonl", "-C", "64", "-o", "out", "--cache-dir", "c", "-q"]),
    "verify, one piece": (("packtool.verification.run.check_shard",), "packtool.verification.shard",
                          ["verify", "out", "-q"]),
}


@pytest.mark.parametrize("run", RAN_ONE)
def test_a_run_that_had_one_worker_is_not_told_to_pass_workers_1(run, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _rows(tmp_path)
    if run.startswith("verify"):
        assert run_main(monkeypatch, RAN_ONE["pack, one shard"][2]) == [0]
    monkeypatch.setattr("packtool.workers.cores", lambda: 2)
    monkeypatch.setattr("packtool.slabs.writer.default_cores", lambda: 2)
    monkeypatch.setattr("packtool.verification.run.cores", lambda: 2)
    sites, module, argv = RAN_ONE[run]
    import packtool.slabs.routed  # noqa: F401  (imported here, not first under the patch: it keeps the name)
    for site in sites:
        monkeypatch.setattr(site, raiser(module))
    capsys.readouterr()
    assert run_main(monkeypatch, argv) == [2]
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
    assert len(err) == 1 and "out of memory" in err[0], err
    assert "already (--workers 1)" in err[0] and "try --workers" not in err[0] and "(--workers 1:" not in err[0], err
