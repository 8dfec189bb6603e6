"""Issue 23 class 6 (stranger trial S28-4): a library error names the argument its caller
passed, the command line its flag. Every library error site that once named a flag is a case,
run both ways: through the library (the message names the argument, no `--flag`) and through
the command line (the line names the flag, and --json's `flag` says it). A guard scans the
library for raise sites that spell a flag themselves instead of through errors.arg."""
from __future__ import annotations

import ast
import json
import pathlib
import re

import numpy as np
import pytest
from conftest import GPT2
from typer.testing import CliRunner

import packtool
from packtool.align import Alignment
from packtool.cli.app import app
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig

runner = CliRunner()
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def _rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _tokens(tmp):
    return _rows(tmp / "x.jsonl", [{"input_ids": [1, 2, 3, 4]}, {"input_ids": [5, 6]}])


def _lib_pack(tmp, src=None, tok=None, **kw):
    kw.setdefault("output", str(tmp / "out"))
    packtool.pack([src or _tokens(tmp)], Alignment(capacity=64), PackingConfig(),
                  tok or TokenizeConfig(), cache_dir=str(tmp / "cache"), **kw)


def _cli_pack(tmp, *flags, src=None):
    return ["pack", src or _tokens(tmp), "-C", "64", "--cache-dir", str(tmp / "cache"), *flags]


def _previous(tmp):
    _lib_pack(tmp)
    return str(tmp / "out")


def _file(tmp, name="taken"):
    (tmp / name).write_text("a user's file\n")
    return str(tmp / name)


def _side(tmp, values):
    return _rows(tmp / "side.jsonl", [{"input_ids": [1, 2, 3], "f": values}])


def _text(tmp):
    return _rows(tmp / "t.jsonl", [{"text": "hello there"}])


def _lengths(tmp, name="l.npy"):
    if name.endswith(".npy"):
        np.save(tmp / name, np.array([10, 20, 30]))
    else:
        (tmp / name).write_text("id,n\n1,10\n2,20\n")
    return str(tmp / name)


def _plan_file(tmp):
    from packtool.planning.core import plan
    from packtool.planning.plan_file import write_plan
    write_plan(plan(np.array([10, 20, 30]), Alignment(capacity=64), PackingConfig()), str(tmp / "p.parquet"))
    return str(tmp / "p.parquet")


def _inspect_plan(tmp):
    from packtool.inspection.planned import inspect_plan_file
    inspect_plan_file(_plan_file(tmp), Alignment(capacity=64, tp=2), PackingConfig())


def _html(tmp):
    from packtool.inspection.html import check_html_path
    check_html_path(_file(tmp, "report.html"))


def _write_plan(tmp):
    from packtool.planning.core import plan
    from packtool.planning.plan_file import write_plan
    write_plan(plan(np.array([10]), Alignment(capacity=64), PackingConfig()), _file(tmp))


def _load(tmp, name, column=None):
    from packtool.planning.lengths import load_lengths
    load_lengths(_lengths(tmp, name), column)


def _in_cwd(tmp, monkeypatch):
    monkeypatch.chdir(tmp)
    return str(tmp)


def _chat(tmp):
    return _rows(tmp / "chat.jsonl", [{"messages": [{"role": "user", "content": "hi"},
                                                    {"role": "assistant", "content": "yo"}]}])


# case -> (library call (tmp, monkeypatch), what its message names,
#          command line (tmp, monkeypatch), the flag its line names)
CASES = {
    "output required": (lambda t, m: _lib_pack(t, output=None), "output",
                        lambda t, m: _cli_pack(t), "--output"),
    "output a file": (lambda t, m: _lib_pack(t, output=_file(t)), "output",
                      lambda t, m: _cli_pack(t, "-o", _file(t)), "--output"),
    "previous output": (lambda t, m: _lib_pack(t, output=_previous(t)), "overwrite=True",
                        lambda t, m: _cli_pack(t, "-o", _previous(t)), "--overwrite"),
    "output is the working dir": (lambda t, m: _lib_pack(t, output=_in_cwd(t, m)), "output='packed/'",
                                  lambda t, m: _cli_pack(t, "-o", _in_cwd(t, m)), "--output packed/"),
    "output holds the input": (lambda t, m: _lib_pack(t, output=str(t)), "output",
                               lambda t, m: _cli_pack(t, "-o", str(t)), "--output"),
    "output in the cache": (lambda t, m: _lib_pack(t, output=str(t / "cache" / "o")), "cache_dir",
                            lambda t, m: _cli_pack(t, "-o", str(t / "cache" / "o")), "--cache-dir"),
    "on_empty": (lambda t, m: _lib_pack(t, src=_rows(t / "e.jsonl", [{"input_ids": []}])), "on_empty='skip'",
                 lambda t, m: _cli_pack(t, "-o", str(t / "o"), src=_rows(t / "e.jsonl", [{"input_ids": []}])),
                 "--on-empty skip"),
    "plan_shard_rows": (lambda t, m: _lib_pack(t, plan_shard_rows=-1), "plan_shard_rows",
                        lambda t, m: _cli_pack(t, "-o", str(t / "o"), "--plan-shard-rows", "-1"), "--plan-shard-rows"),
    "side spec": (lambda t, m: TokenizeConfig(side_columns=("f:int8",)), "side_columns",
                  lambda t, m: _cli_pack(t, "-o", str(t / "o"), "--side-columns", "f:int8"), "--side-columns"),
    "side name twice": (lambda t, m: TokenizeConfig(side_columns=("f", "f")), "side_columns",
                        lambda t, m: _cli_pack(t, "-o", str(t / "o"), "--side-columns", "f,f"), "--side-columns"),
    "support name": (lambda t, m: TokenizeConfig(support_columns=("input_ids",)), "support_columns",
                     lambda t, m: _cli_pack(t, "-o", str(t / "o"), "--support-columns", "input_ids"),
                     "--support-columns"),
    "side bool": (lambda t, m: _lib_pack(t, src=_side(t, [True, False, True]), tok=TokenizeConfig(side_columns=("f",))),
                  "f:int32 in side_columns",
                  lambda t, m: _cli_pack(t, "-o", str(t / "o"), "--side-columns", "f", src=_side(t, [True, False, True])),
                  "f:int32 in --side-columns"),
    "side too wide": (lambda t, m: _lib_pack(t, src=_side(t, [1, 2, 2**40]), tok=TokenizeConfig(side_columns=("f:int32",))),
                      "f:int64 in side_columns",
                      lambda t, m: _cli_pack(t, "-o", str(t / "o"), "--side-columns", "f:int32",
                                             src=_side(t, [1, 2, 2**40])), "f:int64 in --side-columns"),
    "side missing": (lambda t, m: _lib_pack(t, tok=TokenizeConfig(side_columns=("g",))), "side_columns",
                     lambda t, m: _cli_pack(t, "-o", str(t / "o"), "--side-columns", "g"), "--side-columns"),
    "chat template": (lambda t, m: _lib_pack(t, src=_chat(t), tok=TokenizeConfig(tokenizer=GPT2)),
                      "chat_template='chatml'",
                      lambda t, m: _cli_pack(t, "-o", str(t / "o"), "--tokenizer", GPT2, src=_chat(t)),
                      "--chat-template chatml"),
    "no tokenizer": (lambda t, m: _lib_pack(t, src=_text(t)), None,
                     lambda t, m: _cli_pack(t, "-o", str(t / "o"), src=_text(t)), "--tokenizer"),
    "lengths column on npy": (lambda t, m: _load(t, "l.npy", "n"), "drop column",
                              lambda t, m: ["plan", "--lengths", _lengths(t), "--column", "n"], "drop --column"),
    "lengths column missing": (lambda t, m: _load(t, "l.csv"), "pick it with column",
                               lambda t, m: ["plan", "--lengths", _lengths(t, "l.csv")], "pick it with --column"),
    "lengths a folder": (lambda t, m: __import__("packtool.planning.lengths").planning.lengths.load_lengths(str(t)),
                         None, lambda t, m: ["plan", "--lengths", str(t)], "--lengths"),
    "plan -o exists": (lambda t, m: _write_plan(t), "overwrite=True",
                       lambda t, m: ["plan", "--lengths", _lengths(t), "-o", _file(t)], "--overwrite"),
    "html exists": (lambda t, m: _html(t), "overwrite=True",
                    lambda t, m: ["inspect", "--lengths", _lengths(t), "--html", _file(t, "report.html")], "--overwrite"),
    "plan settings differ": (lambda t, m: _inspect_plan(t), "tp=2",
                             lambda t, m: ["inspect", "--plan", _plan_file(t), "-C", "64", "--tp", "2"], "--tp 2"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_library_caller_reads_its_argument(tmp_path, monkeypatch, case):
    call, needle, _, _ = CASES[case]
    with pytest.raises(ValueError) as e:
        call(tmp_path, monkeypatch)
    msg = str(e.value)
    assert not FLAG.search(msg.split("`")[0] + "".join(msg.split("`")[2::2])), msg  # a quoted command may
    if needle:
        assert needle in msg, msg


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_command_line_reads_its_flag(tmp_path, monkeypatch, case):
    _, _, argv, flag = CASES[case]
    args = argv(tmp_path, monkeypatch)
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.stdout + r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("error: ") and flag in line, line


# --- the guard: a library raise site spells no flag itself -------------------------------

LIBRARY = pathlib.Path(packtool.__file__).parent
# The command line's own modules speak its flags: packtool/cli and the train command's typer
# options (megatron/train_cli.py); the trainer it drives (TrainConfig, the loop, the dataset, the
# model) is a library, named by its arguments like every other.
CLI_MODULES = {"cli"}
CLI_FILES = {"megatron/train_cli.py"}


def _spelled_flags(site: ast.AST) -> list[str]:
    """Flags written out in the string literals of a raise or warning call, outside a `quoted`
    command line (`packtool plan --output`, `hf download --local-dir`). The literals of one
    call are joined first: an f-string splits a quoted command into several."""
    text = "".join(c.value for c in ast.walk(site) if isinstance(c, ast.Constant) and isinstance(c.value, str))
    return FLAG.findall("".join(text.split("`")[0::2]))


def _sites(tree: ast.AST):
    """Every raised expression (`raise bad(...)` too), and every error built or warning said
    elsewhere (`return PacktoolInputError(...)`, `warnings.warn`, `note`, `say`)."""
    raised = {id(n.exc) for n in ast.walk(tree) if isinstance(n, ast.Raise) and n.exc is not None}
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            yield node.exc
        elif isinstance(node, ast.Call) and id(node) not in raised:
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name.endswith("Error") or name in ("warn", "note", "say"):
                yield node


def test_no_library_raise_site_spells_a_flag():
    bad = []
    for path in sorted(LIBRARY.rglob("*.py")):
        rel = path.relative_to(LIBRARY)
        if rel.parts[0] in CLI_MODULES or rel.as_posix() in CLI_FILES:
            continue
        tree = ast.parse(path.read_text())
        for site in _sites(tree):
            flags = _spelled_flags(site)
            if flags:
                bad.append(f"{rel}:{site.lineno}: {sorted(set(flags))}")
    assert not bad, "spell these through errors.arg / cli_flag:\n" + "\n".join(bad)


def test_the_guard_sees_a_spelled_flag():
    tree = ast.parse('raise PacktoolInputError(f"pick another --output {x}")\n'
                     'raise ValueError("see `packtool plan --output`")\n')
    flagged = [s for s in _sites(tree) if _spelled_flags(s)]
    assert len(flagged) == 1 and flagged[0].lineno == 1
