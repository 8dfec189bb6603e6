"""Stranger 31 S31-6: `pack -o '~/x'` expanded `~` but `verify '~/x'` (the command its Done line
suggested) did not. `~` is expanded by one rule (params.expanded) for every library path argument
(params.path) and every path parameter of every subcommand (flags.PATH_PARAMS, applied by
cli.path_flags before the command's work); a parameter added later must be classified."""
from __future__ import annotations

import os
import shlex

import pytest
import typer
import typer.main
from conftest import GPT2, GSM8K
from typer.testing import CliRunner

import packtool
from packtool.cli import store_flags
from packtool.cli.app import app
from packtool.cli.flags import PATH_PARAMS
from packtool.params import PATHS, path

runner = CliRunner()

# every other parameter of a subcommand: a name, a number, a choice or a switch, never a path
NOT_PATHS = {"algorithm", "column", "convention", "cp", "debug", "dp", "fixed_length", "fp8", "json_out",
             "max_tokens", "overflow", "overwrite", "seed", "sp", "tp", "add_bos", "add_eos", "config",
             "dry_run", "engine", "on_empty", "plan_shard_rows", "progress", "prompt_field", "prompt_separator",
             "ray_address", "response_field", "shape", "shard_tokens", "side_columns", "split",
             "support_columns", "text_field", "workers", "compare", "quiet", "what_if", "max_problems",
             "device", "ffn", "grad_accum", "heads", "hidden", "layers", "lm_head", "log_every", "lr",
             "micro_batch_tokens", "save_every", "steps", "vocab_size", "warmup"}
# what each subcommand needs besides the parameter under test ("X": the required argument)
BASE = {"plan": ["--lengths", "X"], "pack": ["X", "--dry-run"], "inspect": ["X"],
        "verify": ["X", "--source", "S"], "train": ["X"]}


def _group():
    return typer.main.get_command(app)


def test_every_parameter_is_classified_path_or_not():
    for name, cmd in _group().commands.items():
        odd = {p.name for p in cmd.params} - PATH_PARAMS[name] - NOT_PATHS
        assert not odd, f"{name}: {odd} — a path (flags.PATH_PARAMS) or not (NOT_PATHS here)?"


def _argv(cmd, param) -> list[str]:
    args = list(BASE[cmd])
    if param.param_type_name == "argument":
        if cmd == "inspect" and param.name != "directory":
            args = []
        return [cmd, *("~/p" if a == "X" else a for a in args)]
    if cmd == "inspect" and param.name in ("lengths", "plan_file"):
        args = []
    if cmd == "plan" and param.name == "lengths":
        return [cmd, "--lengths", "~/p"]
    return [cmd, *args, param.opts[0], "~/p"]


CASES = [(cmd, name) for cmd, names in PATH_PARAMS.items() for name in sorted(names)]


@pytest.mark.parametrize("cmd, name", CASES)
def test_every_path_parameter_reaches_its_command_with_home_expanded(cmd, name, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path))
    group = _group()
    command = group.commands[cmd]
    param = next(p for p in command.params if p.name == name)
    seen = {}

    def stop(command, args):  # the check after the path flags': what the command's work gets
        seen.update(args)
        raise typer.Exit(0)
    monkeypatch.setattr(store_flags, "check_store_flags", stop)
    code = group.main(_argv(cmd, param), prog_name="packtool", standalone_mode=False)
    assert code == 0 and name in seen, capsys.readouterr()
    value = seen[name]
    values = [value] if isinstance(value, str) else list(value)
    assert os.path.join(str(tmp_path), "p") in values and not any(v.startswith("~") for v in values), values


@pytest.mark.parametrize("name", sorted(PATHS))
def test_every_library_path_argument_expands_home(name, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert path(name, "~/p") == os.path.join(str(tmp_path), "p")
    assert path(name, "p~") == "p~"


def test_the_done_line_names_a_folder_verify_and_inspect_take(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    with open(GSM8K) as f:
        (tmp_path / "s.jsonl").write_text("".join(f.readlines()[:10]))
    r = runner.invoke(app, ["pack", "~/s.jsonl", "--tokenizer", GPT2, "-C", "1024", "-q", "-o", "~/x",
                            "--cache-dir", "~/c"])
    assert r.exit_code == 0, r.output
    done = next(ln for ln in r.stdout.splitlines() if ln.startswith("Done:"))
    suggested = shlex.split(done.split("`")[1])
    assert suggested[-1] == str(tmp_path / "x"), done
    assert runner.invoke(app, suggested[1:]).exit_code == 0
    for given in ("~/x", str(tmp_path / "x")):
        assert runner.invoke(app, ["verify", given, "-q"]).exit_code == 0
        assert runner.invoke(app, ["inspect", given, "--json"]).exit_code == 0
        assert packtool.verify(given).ok and packtool.inspect(given).to_dict()
