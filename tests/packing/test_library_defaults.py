"""Issue 23 class 6 (S28-5): the library accepts what the CLI accepts. `packtool.pack(...)` on
pre-tokenized rows demanded a TokenizeConfig and an Alignment that `packtool pack` does not.
For every subcommand and the library call behind it: the library requires only what the CLI
requires (the data), and every setting the CLI defaults has the same default in the library
(its keyword arguments and the config objects the flags build)."""
from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import typer
from typer.testing import CliRunner

import packtool
from packtool.align import Alignment
from packtool.cli.app import app
from packtool.engines.ray_engine import pack_ray
from packtool.inspection import inspect_lengths, inspect_packed, inspect_plan_file
from packtool.planning.core import PackingConfig
from packtool.slabs.format import SlabManifest
from packtool.tokenize.config import TokenizeConfig
from packtool.verification.run import source_store

# subcommand -> the library calls behind it, each with the one argument that names the data
CALLS = {"plan": [(packtool.plan, "lengths")], "pack": [(packtool.pack, "inputs"), (pack_ray, "inputs")],
         "inspect": [(inspect_packed, "directory"), (inspect_lengths, "lengths"), (inspect_plan_file, "path")],
         "verify": [(packtool.verify, "directory")]}
# a flag's name where the library's differs; CLI-only presentation flags are not settings
LIB_NAME = {"max_tokens": "capacity", "plan_file": "path"}
CLI_ONLY = {"json_out", "quiet", "progress", "debug", "html", "engine", "ray_address", "config", "more",
            "source", "column", "directory", "lengths", "inputs", "plan_file"}
WRITES_IN_CLI = {"plan": {"output", "overwrite"}, "inspect": {"overwrite"}}  # plan -o, inspect --html
HELPERS = {"verify": [source_store]}  # verify --source's tokenizing and cache
CONFIGS = (Alignment, PackingConfig, TokenizeConfig)
CLI_NONE_IS = {"shape": "auto", "on_empty": "error", "side_columns": (), "support_columns": ()}  # flags left out mean these config values


def _cli_params(command: str) -> dict:
    cmd = typer.main.get_command(app).commands[command]
    return {p.name: p.default for p in cmd.params}


def _cases():
    return [(c, f, data) for c, calls in CALLS.items() for f, data in calls]


@pytest.mark.parametrize("command,func,data", _cases(), ids=lambda x: getattr(x, "__name__", x))
def test_library_requires_only_the_data(command, func, data):
    required = [n for n, p in inspect.signature(func).parameters.items() if p.default is inspect.Parameter.empty]
    assert required == [data], f"{func.__name__} requires {required}; `packtool {command}` only the data"


def _defaults(command: str):
    for name, cli in _cli_params(command).items():
        if name in CLI_ONLY or name in WRITES_IN_CLI.get(command, ()):
            continue
        lib = LIB_NAME.get(name, name)
        yield command, name, lib, CLI_NONE_IS.get(name, cli) if cli is None else cli


DEFAULTS = [d for c in CALLS for d in _defaults(c)]


@pytest.mark.parametrize("command,flag,lib,cli_default", DEFAULTS, ids=[f"{c}-{f}" for c, f, _, _ in DEFAULTS])
def test_library_defaults_as_the_cli_does(command, flag, lib, cli_default):
    """Where the setting lives in the library (a config object's field or a call's keyword
    argument), its default is the CLI's."""
    found = []
    for cls in CONFIGS:
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
        if lib in fields:
            found.append(fields[lib].default)
    for func in [f for f, _ in CALLS[command]] + HELPERS.get(command, []):
        p = inspect.signature(func).parameters.get(lib)
        if p is not None and p.default is not inspect.Parameter.empty:
            found.append(p.default)
    assert found, f"--{flag.replace('_', '-')} of `packtool {command}` sets nothing in the library"
    assert all(v == cli_default for v in found), (flag, cli_default, found)


@pytest.fixture
def tokens_parquet(tmp_path):
    path = tmp_path / "ids.parquet"
    pq.write_table(pa.table({"input_ids": [[1, 2, 3], [4, 5], list(range(6, 20))]}), path)
    return str(path)


def test_pack_pretokenized_without_configs_as_the_cli(tmp_path, tokens_parquet):
    cli = CliRunner().invoke(app, ["pack", tokens_parquet, "-o", str(tmp_path / "cli"), "--no-progress",
                                   "--cache-dir", str(tmp_path / "cache")])
    assert cli.exit_code == 0, cli.stdout + cli.stderr
    packtool.pack(tokens_parquet, output=str(tmp_path / "lib"), cache_dir=str(tmp_path / "cache"))
    a, b = SlabManifest.read(str(tmp_path / "cli")), SlabManifest.read(str(tmp_path / "lib"))
    assert (a.alignment, a.packing, a.raw.get("counts")) == (b.alignment, b.packing, b.raw.get("counts"))


def test_plan_and_inspect_lengths_without_configs():
    lengths = np.array([100, 8000, 3000, 5000])
    p = packtool.plan(lengths)
    assert p.alignment == Alignment() and p.num_slabs >= 2
    assert packtool.inspect_lengths(lengths).efficiency > 0
