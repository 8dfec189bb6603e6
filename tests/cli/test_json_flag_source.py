"""Issue 23 class 6, S35 edges2: `--json`'s `flag` and `kind` say what the error is about.
The flag was guessed from the message's text and could be one the fix suggests: a JSON Lines
file with no rows said `--split` ("... and --split for a dataset"), `inspect --plan` on a
damaged plan file said no flag (the fix quotes `packtool plan --output`). It comes from what
raised the error (its own `flag`), or from the command's argument that named the file at
fault, never from the fix. A store or the operating system refusing a file said `input` for
`-o` (a StorageError) or `io` (an OSError), a kind the README did not list: it is the kind of
the argument that named the file, and every kind packtool emits is one the README lists."""
from __future__ import annotations

import ast
import errno
import json
import pathlib
import re

import numpy as np
import pytest
from test_json_where import CASES as WHERE_CASES
from typer.testing import CliRunner

import packtool.cli.failure as failure
from packtool.cli.app import app
from packtool.cli.places import COMMAND_PLACES, PLACES
from packtool.storage import StorageError

runner = CliRunner()
ROOT = pathlib.Path(__file__).resolve().parents[2]

# test_json_where's cases (every subcommand's error paths), each with the flag it is about
WHERE_FLAGS = {
    "plan: no lengths file": "--lengths", "plan: lengths a folder": "--lengths", "plan: -o exists": "--output",
    "plan: bad --tp": "--tp", "plan: --fixed-length over -C": "--fixed-length", "plan: column on npy": "--column",
    "pack: no input": None, "pack: no -o": "--output", "pack: -o a file": "--output",
    "pack: --workers 0": "--workers", "pack: --engine": "--engine", "pack: --shard-tokens 0": "--shard-tokens",
    "pack: --plan-shard-rows -1": "--plan-shard-rows", "pack: empty --side-columns name": "--side-columns",
    "pack: bool side column": "--side-columns", "inspect: no output": None, "inspect: two sources": "--lengths",
    "inspect: --html exists": "--html", "inspect: no plan file": "--plan", "verify: a file": None,
}


def _tokens(t, body='{"input_ids": [1, 2, 3]}\n', name="x.jsonl"):
    (t / name).write_text(body)
    return str(t / name)


def _plan_file(t, body: bytes = b"PAR1xx"):
    (t / "p.parquet").write_bytes(body)
    return str(t / "p.parquet")


def _lengths(t, arr=(5, 7, 9)):
    np.save(t / "l.npy", np.array(arr))
    return str(t / "l.npy")


def _pack(t, *flags):
    return ["pack", _tokens(t), "-C", "64", "--cache-dir", str(t / "cache"), *flags]


# errors whose fix names another flag (or none is at fault), from each subcommand: (args, flag, kind)
FIX_CASES = {
    "pack: a file with no rows (fix names --split)": (lambda t: ["pack", _tokens(t, ""), "--dry-run"], None, "input"),
    "pack: a row over -C (fix names --max-tokens)": (lambda t: ["pack", _tokens(t), "-C", "2", "--dry-run",
                                                              "--cache-dir", str(t / "c")], None, "config"),
    "pack: an empty example (its own flag)": (lambda t: ["pack", _tokens(t, '{"input_ids": [1]}\n{"input_ids": []}\n'),
                                               "--dry-run", "--cache-dir", str(t / "c")], "--on-empty", "input"),
    "pack: -o on an unknown store": (lambda t: _pack(t, "-o", "nosuch://bucket/out"), "--output", "output"),
    "pack: -o with credentials": (lambda t: _pack(t, "-o", "s3://user:pw@bucket/out"), "--output", "output"),
    "pack: --cache-dir on an unknown store": (lambda t: ["pack", _tokens(t), "-o", str(t / "o"), "--cache-dir",
                                                         "nosuch://bucket/c"], "--cache-dir", "cache"),
    "pack: an input on an unknown store": (lambda t: ["pack", "nosuch://bucket/in.jsonl", "-o", str(t / "o")],
                                           None, "input"),
    "plan: a length over -C (the file's row)": (lambda t: ["plan", "--lengths", _lengths(t), "-C", "4"], "--lengths",
                                                "config"),
    "plan: a 2-D lengths file": (lambda t: ["plan", "--lengths", _lengths(t, [[1, 2]])], "--lengths", "input"),
    "inspect: a damaged plan file (fix quotes plan --output)": (lambda t: ["inspect", "--plan", _plan_file(t)],
                                                                "--plan", "input"),
    "inspect: a plan file that is a folder": (lambda t: ["inspect", "--plan", str(t)], "--plan", "input"),
    "inspect: a lengths row of 0": (lambda t: ["inspect", "--lengths", _lengths(t, [3, 0])], "--lengths", "input"),
    "verify: no such folder": (lambda t: ["verify", str(t / "none")], None, "format"),
}


def _json_error(args) -> dict:
    r = runner.invoke(app, [args[0], "--json", *args[1:]])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    return json.loads(r.stdout.strip().splitlines()[-1])["error"]


@pytest.mark.parametrize("case", sorted(WHERE_FLAGS))
def test_every_subcommands_errors_name_the_flag_they_are_about(tmp_path, case):
    err = _json_error(WHERE_CASES[case](tmp_path))
    assert err["flag"] == WHERE_FLAGS[case], err


@pytest.mark.parametrize("case", sorted(FIX_CASES))
def test_the_flag_is_never_the_one_a_fix_names(tmp_path, case):
    make, flag, kind = FIX_CASES[case]
    err = _json_error(make(tmp_path))
    assert (err["flag"], err["kind"]) == (flag, kind), err


def test_the_flag_table_covers_every_case():
    assert set(WHERE_FLAGS) == {c for c in WHERE_CASES if not c.startswith("verify: not an output")}


# --- an OSError or a StorageError: the kind and flag of the argument that named the file ---------

def _report(monkeypatch, capsys, e, command="pack", **args) -> dict:
    monkeypatch.setitem(failure._STATE, "args", args)
    monkeypatch.setitem(failure._STATE, "running", command)
    assert failure.report(e, json_out=True) == 2
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])["error"]


@pytest.mark.parametrize("where,flag,kind", [
    ("out/slabs-00000.parquet", "--output", "output"), ("out", "--output", "output"),
    ("cache/entry/part-0.parquet", "--cache-dir", "cache"), ("in/a.jsonl", None, "input"),
    ("elsewhere/tmp123", None, "io"), (None, None, "io"),
])
@pytest.mark.parametrize("error", ["enospc", "eacces", "store"])
def test_a_refused_read_or_write_has_its_arguments_kind(tmp_path, monkeypatch, capsys, where, flag, kind, error):
    path = str(tmp_path / where) if where else None
    if error == "store":
        if path is None:
            pytest.skip("a StorageError always names its location")
        e = StorageError("cannot write it (AccessDenied)", path=path)
        kind = "input" if kind == "io" else kind  # a store location of no argument: its class's kind
    else:
        code = errno.ENOSPC if error == "enospc" else errno.EACCES
        e = OSError(code, "refused", path) if path else OSError(code, "refused")
    err = _report(monkeypatch, capsys, e, output=str(tmp_path / "out"), cache_dir=str(tmp_path / "cache"),
                  inputs=[str(tmp_path / "in" / "*.jsonl")])
    assert (err["flag"], err["kind"]) == (flag, kind), err


def test_a_store_output_is_matched_without_its_query(monkeypatch, capsys):
    e = StorageError("cannot write it (AccessDenied)", path="s3://bucket/out/slabs-00000.parquet")
    err = _report(monkeypatch, capsys, e, output="s3://bucket/out?endpoint_override=127.0.0.1:9")
    assert (err["flag"], err["kind"]) == ("--output", "output"), err


def test_trains_config_file_is_its_own_place(tmp_path, monkeypatch, capsys):
    e = OSError(errno.EACCES, "refused", str(tmp_path / "model.yaml"))
    err = _report(monkeypatch, capsys, e, command="train", config=str(tmp_path / "model.yaml"))
    assert (err["flag"], err["kind"]) == ("--config", "input"), err
    err = _report(monkeypatch, capsys, e, command="pack", config=str(tmp_path / "model.yaml"))
    assert (err["flag"], err["kind"]) == (None, "io"), err  # pack's --config names a dataset configuration


# --- every kind packtool emits is one the README's error contract lists ---------------------------

def _literal_kinds() -> set[str]:
    """Kinds the CLI writes as literals: print_error's second argument, `kind = "..."` in
    packtool/cli, and the interrupted object cli/__init__.py writes by hand."""
    found = set()
    for p in (ROOT / "packtool" / "cli").glob("*.py"):
        src = p.read_text()
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print_error" and len(node.args) > 1:
                if isinstance(node.args[1], ast.Constant):
                    found.add(node.args[1].value)
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and any(
                    getattr(t, "id", None) == "kind" for t in node.targets):
                found.add(node.value.value)
        found.update(re.findall(r'"kind": \\?"([a-z]+)\\?"', src))
    return found


def test_every_kind_packtool_emits_is_one_the_readme_lists(tmp_path, monkeypatch):
    from test_error_kinds import CLASSES, readme_kinds
    monkeypatch.setitem(failure._STATE, "args", {"output": str(tmp_path / "o")})
    emitted = {c.kind for c in CLASSES if c.__name__ != "PacktoolError"}  # the base is never raised
    emitted |= {failure.describe(e)[0] for e in (OSError(errno.EIO, "x"), OSError(errno.EIO, "x", str(tmp_path / "o")),
                                                   ValueError("x"), UnicodeError("x"), RuntimeError("x"))}
    emitted |= {role for places in (PLACES, *COMMAND_PLACES.values()) for _, role in places.values()}
    emitted |= _literal_kinds()
    assert {"usage", "interrupted", "io", "internal", "output", "cache"} <= emitted  # the scan sees them
    assert emitted <= readme_kinds(), sorted(emitted - readme_kinds())
