"""Issue 23 class 6, S35: `--json`'s `kind` says whose fault an error is (README, error contract:
usage, input, config, cache, format, output, resources). A lengths file packtool cannot read
(`plan --lengths x.npy` with a damaged file) said `config`, the kind of a flag out of range,
because the planner's PlanError carried it: every error about a file the user gave is `input`.
Two halves: every PacktoolError class packtool defines maps to its kind, and every input-file
refusal of plan / inspect (each reader of --lengths, --plan's recorded settings) says `input`
through the command line, while the refusals that are a flag's stay `config`."""
from __future__ import annotations

import ast
import importlib
import json
import pathlib
import re

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.cli.failure import describe
from packtool.errors import PacktoolError

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "packtool"


def readme_kinds() -> set[str]:
    """The kinds the README's error contract lists (`kind`: `input`, ...; `kind` `usage`)."""
    text = (PACKAGE.parent / "README.md").read_text()
    section = text[text.index("## Errors, exit codes"):]
    section = section[:section.index("\n## ", 5)]
    lists = re.findall(r"`kind`:? ((?:`[a-z]+`(?:, | or |; )?)+)", section)
    return {w for group in lists for w in re.findall(r"`([a-z]+)`", group)}


README_KINDS = readme_kinds()
# every PacktoolError class -> the kind --json gives it: a new class must be placed here
KIND_OF = {
    "PacktoolError": "error",  # the base: never raised as itself (test_no_bare_base_error)
    "PacktoolInputError": "input", "PacktoolIndexError": "input", "StorageError": "input",
    "InspectError": "input", "OnlinePackError": "input", "PlanInputError": "input",
    "PacktoolConfigError": "config", "PlanError": "config", "SequenceError": "config",
    "AlignmentError": "config", "DPError": "config", "ConversionChanged": "config",
    "PacktoolCacheError": "cache", "CacheDamagedError": "cache", "StorageCacheError": "cache",
    "PacktoolFormatError": "format", "FormatError": "format", "NotAnOutputError": "format",
    "PacktoolOutputError": "output", "OutputExistsError": "output", "StoreOutputExistsError": "output",
    "StorageOutputError": "output",
    "LeaseLostError": "output", "StdoutFailed": "output",
    "ThreadRefused": "resources",
}


def _error_classes() -> list[type]:
    """Every class below PacktoolError defined in packtool's source (found by reading it, so that
    no module must be imported for its classes to be seen), imported from its module."""
    names = set(KIND_OF)
    defined: dict[str, str] = {}
    grew = True
    trees = {p: ast.parse(p.read_text()) for p in PACKAGE.rglob("*.py")}
    while grew:  # subclasses of subclasses, in any order
        grew = False
        for path, tree in trees.items():
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.name not in defined and any(
                        getattr(b, "id", getattr(b, "attr", None)) in names | set(defined) for b in node.bases):
                    mod = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
                    defined[node.name] = mod
                    grew = True
    defined["PacktoolError"] = "packtool.errors"
    return [getattr(importlib.import_module(mod), name) for name, mod in sorted(defined.items())]


CLASSES = _error_classes()


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_error_class_says_its_kind(cls):
    assert cls.__name__ in KIND_OF, f"{cls.__name__}: place it in KIND_OF (which of the README's kinds is it?)"
    try:
        e = cls("m")
    except TypeError:  # SequenceError(sequence, detail)
        e = cls(0, "m")
    kind = describe(e)[0]
    assert kind == KIND_OF[cls.__name__] and (kind in README_KINDS or cls is PacktoolError), kind
    assert e.to_dict()["error"]["kind"] == kind
    if issubclass(cls, __import__("packtool.errors", fromlist=["x"]).PacktoolInputError):
        assert kind == "input", f"{cls.__name__} is an input error but says {kind}"


def test_every_placed_class_is_defined():
    assert sorted(KIND_OF) == sorted(c.__name__ for c in CLASSES)


def test_no_bare_base_error():
    """The base's kind (`error`) is none of the README's: nothing raises PacktoolError itself."""
    for p in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                assert getattr(node.exc.func, "id", None) != "PacktoolError", f"{p}:{node.lineno}"


runner = CliRunner()


def _json_error(args) -> dict:
    r = runner.invoke(app, ["--json", *args])
    assert r.exit_code == 2 and "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr
    assert len([ln for ln in r.stderr.splitlines() if ln.startswith("error:")]) == 1, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])["error"]


def _npy(p, arr):
    np.save(p, arr)


# a lengths file of each kind, damaged or holding what no lengths file does
LENGTHS_FILES = {
    "npy not numpy": ("l.npy", b"garbage"),
    "npy floats": ("f.npy", np.array([1.5, 2.0])),
    "npy negative": ("n.npy", np.array([3, -2])),
    "npy empty": ("e.npy", np.zeros(0, np.int64)),
    "txt a word": ("l.txt", b"1\n2\nx\n"),
    "txt a zero": ("z.txt", b"1\n0\n"),
    "txt a NUL": ("nul.txt", b"1\x00\n"),
    "txt empty": ("e.txt", b""),
    "csv a field too many": ("l.csv", b"length\n1\n2,3\n"),
    "csv no lengths column": ("c.csv", b"a,b\n1,2\n"),
    "csv a word": ("w.csv", b"length\n1\nabc\n"),
    "jsonl not JSON": ("l.jsonl", b'{"length": 1}\n{oops\n'),
    "jsonl a null": ("n.jsonl", b'{"length": 1}\n{"length": null}\n'),
    "a .json array": ("l.json", b"[1, 2]"),
    "parquet damaged": ("l.parquet", b"PAR1garbage"),
    "arrow damaged": ("l.arrow", b"garbage"),
    "a folder": ("dir", None),
    "no such file": ("missing.npy", None),
}


def _lengths_file(tmp_path, case: str) -> str:
    name, body = LENGTHS_FILES[case]
    p = tmp_path / name
    if case == "a folder":
        p.mkdir()
    elif isinstance(body, np.ndarray):
        _npy(p, body)
    elif body is not None:
        p.write_bytes(body)
    return str(p)


@pytest.mark.parametrize("cmd", ["plan", "inspect"])
@pytest.mark.parametrize("case", sorted(LENGTHS_FILES))
def test_a_lengths_file_packtool_cannot_read_is_an_input_error(tmp_path, case, cmd):
    path = _lengths_file(tmp_path, case)
    err = _json_error([cmd, "--lengths", path, "-C", "4096"])
    # a file without a lengths column is fixed by naming one: --column
    flag = "--column" if case == "csv no lengths column" else "--lengths"
    assert err["kind"] == "input" and err["flag"] == flag, err
    assert path in err["message"], err


@pytest.mark.parametrize("args,flag", [
    (["--column", "x"], "--column"),  # a .npy has no columns
    (["--column", "zz"], "--column"),  # a CSV without that column
])
def test_a_column_the_file_lacks_is_an_input_error(tmp_path, args, flag):
    path = _lengths_file(tmp_path, "csv no lengths column" if args[1] == "zz" else "npy floats")
    err = _json_error(["plan", "--lengths", path, *args])
    assert err["kind"] == "input" and err["flag"] == flag, err


def _plan_file(tmp_path) -> str:
    lengths = tmp_path / "ok.npy"
    np.save(lengths, np.array([5, 7, 9]))
    out = tmp_path / "plan.parquet"
    r = runner.invoke(app, ["plan", "--lengths", str(lengths), "-C", "64", "-o", str(out)])
    assert r.exit_code == 0, r.stderr
    return str(out)


def test_a_plan_file_whose_recorded_settings_cannot_be_read_is_an_input_error(tmp_path):
    from packtool.planning.plan_file import META_KEY
    path = _plan_file(tmp_path)
    t = pq.read_table(path)
    pq.write_table(t.replace_schema_metadata({**t.schema.metadata, META_KEY: b'{"capacity": "many"}'}), path)
    err = _json_error(["inspect", "--plan", path])
    assert err["kind"] == "input" and "plan settings" in err["message"], err


def test_a_damaged_plan_file_names_no_flag_of_the_fix(tmp_path):
    """The fix quotes `packtool plan --output`: that command's flag is not the one at fault."""
    p = tmp_path / "p.parquet"
    p.write_bytes(b"PAR1xx")
    err = _json_error(["inspect", "--plan", str(p)])
    assert err["kind"] == "input" and err["flag"] == "--plan", err  # the file's flag (S35 edges2)


@pytest.mark.parametrize("args,kind", [
    (["plan", "--lengths", "{ok}", "-C", "4"], "config"),  # a length over -C: the flag's fix
    (["plan", "--lengths", "{ok}", "--tp", "0"], "config"),
    (["plan", "--lengths", "{ok}", "--bogus"], "usage"),
    (["inspect", "{dir}"], "format"),  # a folder that is no packed output
])
def test_the_other_kinds_stay_theirs(tmp_path, args, kind):
    ok = tmp_path / "ok.npy"
    np.save(ok, np.array([5, 7, 9]))
    (tmp_path / "d").mkdir()
    err = _json_error([a.format(ok=ok, dir=tmp_path / "d") for a in args])
    assert err["kind"] == kind, err
