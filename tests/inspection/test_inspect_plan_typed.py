"""`inspect --plan` holds the file's recorded settings only to the flags typed (S36-7): a flag
equal to the record was refused, with every untyped default listed as "passed"; a flag that
differs is named alone. The library's whole Alignment/PackingConfig names only what differs."""
from __future__ import annotations

import re

import numpy as np
import pytest
from typer.testing import CliRunner

from packtool.align import Alignment
from packtool.cli.app import app
from packtool.inspection import InspectError, inspect_plan_file
from packtool.planning.core import PackingConfig

runner = CliRunner()
MADE = ["-C", "4096", "--tp", "2", "--cp", "2", "--no-sp", "--fp8", "blockwise", "--fixed-length", "4096",
        "-a", "mffd", "--overflow", "split", "--dp", "2", "--seed", "3"]
# each setting: the flags as recorded, and a value the record does not hold
SETTINGS = {"capacity": (["-C", "4096"], ["-C", "8192"]), "tp": (["--tp", "2"], ["--tp", "4"]),
            "cp": (["--cp", "2"], ["--cp", "1"]), "sp": (["--no-sp"], ["--sp"]),
            "fp8": (["--fp8", "blockwise"], ["--fp8", "none"]),
            "fixed_length": (["--fixed-length", "4096"], ["--fixed-length", "2048"]),
            "convention": (["--convention", "packtool"], ["--convention", "verl"]),
            "algorithm": (["-a", "mffd"], ["-a", "bfd"]), "overflow": (["--overflow", "split"], ["--overflow", "error"]),
            "dp": (["--dp", "2"], ["--dp", "1"]), "seed": (["--seed", "3"], ["--seed", "0"])}


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("typed")
    np.save(d / "lengths.npy", np.random.default_rng(1).integers(30, 6000, 400))
    r = runner.invoke(app, ["plan", "--lengths", str(d / "lengths.npy"), "-o", str(d / "plan.parquet"), *MADE])
    assert r.exit_code == 0, r.stdout + r.stderr
    return str(d / "plan.parquet")


@pytest.mark.parametrize("name", SETTINGS)
def test_a_typed_flag_is_held_to_the_record_alone(plan_file, name):
    same, other = SETTINGS[name]
    r = runner.invoke(app, ["inspect", "--plan", plan_file, *same, "--json"])
    assert r.exit_code == 0, r.stdout + r.stderr  # the recorded value: no conflict
    r = runner.invoke(app, ["inspect", "--plan", plan_file, *other])
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.exit_code == 2 and len(lines) == 1, r.stdout + r.stderr
    passed = re.search(r", but (.*) was passed: drop it ", lines[0])
    assert passed, lines[0]
    assert passed.group(1) == " ".join(other), lines[0]  # no untyped default shown as passed


def test_all_typed_at_once_as_recorded(plan_file):
    r = runner.invoke(app, ["inspect", "--plan", plan_file, *MADE, "--json"])
    assert r.exit_code == 0, r.stdout + r.stderr


@pytest.mark.parametrize("name", SETTINGS)
def test_library_names_only_what_differs(plan_file, name):
    from packtool.planning.plan_file import read_plan_config
    a, pk = read_plan_config(plan_file)
    assert inspect_plan_file(plan_file, a, pk).slabs > 0
    other = {"capacity": 8192, "tp": 4, "cp": 1, "sp": True, "fp8": "none", "fixed_length": 2048,
             "convention": "verl", "algorithm": "bfd", "overflow": "error", "dp": 1, "seed": 0}[name]
    assert inspect_plan_file(plan_file, given={name: getattr(a if hasattr(a, name) else pk, name)}).slabs > 0
    with pytest.raises(InspectError, match=rf", but {name}={other!r} was passed: pass (alignment|packing)=None "):
        inspect_plan_file(plan_file, given={name: other})
    whole = (Alignment(**{**_fields(a), name: other}), pk) if hasattr(a, name) else \
        (a, PackingConfig(**{**_fields(pk), name: other}))
    with pytest.raises(InspectError, match=rf"made with {name}=[^,]*, but {name}={other!r} was passed"):
        inspect_plan_file(plan_file, *whole)


def _fields(obj) -> dict:
    import dataclasses
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init}
