"""Edges of the command line (stranger trial, end of stop 27, and F22), each as a class over
every command it concerns:
  - `--debug` works after the subcommand as before it, on every command (a traceback, then the
    one `error:` line) and stays off for the next command line;
  - Ctrl-C says what that command leaves: verify and the others that write no output folder
    never speak of "previous output";
  - a run that fails or is interrupted removes the --cache-dir folders it created, and no
    other (verify's temporary source cache included);
  - inspect's side column table keeps every figure whole at 80 columns."""
from __future__ import annotations

import os
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rich.console import Console
from typer.testing import CliRunner

from packtool.cli.app import app

runner = CliRunner()

FAILING = {  # a command line of each command that fails on a missing input, before heavy work
    "plan": ["plan", "--lengths", "missing.txt"],
    "pack": ["pack", "missing.parquet", "-o", "out"],
    "inspect": ["inspect", "missing_dir"],
    "verify": ["verify", "missing_dir", "--source", "missing.jsonl"],
    "train": ["train", "missing_dir", "--device", "cpu"],
}


def _errors(r) -> list[str]:
    return [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]


def test_every_command_is_covered():
    assert {c.name or c.callback.__name__ for c in app.registered_commands} == set(FAILING) == set(STOPPED)


@pytest.mark.parametrize("cmd", sorted(FAILING))
def test_debug_after_the_subcommand_as_before_it(tmp_path, monkeypatch, cmd):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PACKTOOL_DEBUG", raising=False)
    args = FAILING[cmd]
    for line in ([args[0], "--debug", *args[1:]], ["--debug", *args]):
        r = runner.invoke(app, line)
        assert r.exit_code == 2 and "Traceback" in r.stderr and len(_errors(r)) == 1, (line, r.output)
    r = runner.invoke(app, args)  # the switch does not outlive its command line
    assert r.exit_code == 2 and "Traceback" not in r.output and len(_errors(r)) == 1, r.output
    assert "--debug" in runner.invoke(app, [cmd, "--help"], env={"COLUMNS": "200"}).stdout


def _interrupt(*a, **k):
    raise KeyboardInterrupt


# command -> (where the interrupt lands, its command line, what the line must say)
STOPPED = {
    "plan": ("packtool.planning.core.plan", ["plan", "--lengths", "l.txt"], "nothing was written"),
    "inspect": ("packtool.inspection.planned.inspect_lengths", ["inspect", "--lengths", "l.txt"], "nothing was written"),
    "verify": ("packtool.verification.run.verify", ["verify", "d"], "nothing was written"),
    "train": ("packtool.slabs.format.SlabManifest.read", ["train", "d", "--device", "cpu"], "checkpoints already saved"),
    "pack": ("packtool.packing.pack", ["pack", "l.txt", "-o", "out"], "left any previous output as it was"),
}


@pytest.mark.parametrize("cmd", sorted(STOPPED))
def test_ctrl_c_says_what_the_command_leaves(tmp_path, monkeypatch, cmd):
    where, args, said = STOPPED[cmd]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "l.txt").write_text("3\n4\n")
    (tmp_path / "d").mkdir()
    mod, _, name = where.rpartition(".")
    if name == "read":  # a classmethod
        mod, name = mod.rpartition(".")[0], mod.rpartition(".")[2]
        import importlib
        monkeypatch.setattr(getattr(importlib.import_module(mod), name), "read", classmethod(_interrupt))
    else:
        monkeypatch.setattr(where, _interrupt)
    r = runner.invoke(app, args)
    (line,) = _errors(r)
    assert r.exit_code == 130 and "Traceback" not in r.output, r.output
    assert "interrupted (Ctrl-C)" in line and said in line, line
    if cmd != "pack":
        assert "previous output" not in line, line


def _made_folders_gone(tmp_path):
    assert sorted(os.listdir(tmp_path / "keep")) == ["mine.txt"]  # the folder that was there stays, as it was
    assert not (tmp_path / "keep" / "new").exists()


@pytest.fixture
def rows(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "mine.txt").write_text("a user's file")
    pq.write_table(pa.table({"input_ids": [[1, 2, 3], [4, 5]]}), tmp_path / "rows.parquet")
    return tmp_path


def test_an_interrupted_pack_removes_the_cache_folders_it_made(rows, monkeypatch):
    monkeypatch.setattr("packtool.tokenize.pipeline._build", _interrupt)
    r = runner.invoke(app, ["pack", "rows.parquet", "-o", "out", "--cache-dir", "keep/new/cache", "-q"])
    assert r.exit_code == 130, r.output
    _made_folders_gone(rows)
    assert not (rows / "out").exists()


@pytest.mark.parametrize("source_ok", [True, False])
def test_verify_source_leaves_no_cache_folder_it_made(rows, monkeypatch, source_ok):
    r = runner.invoke(app, ["pack", "rows.parquet", "-o", "out", "--cache-dir", "c", "-q"])
    assert r.exit_code == 0, r.output
    import atexit
    at_exit = []
    monkeypatch.setattr(atexit, "register", lambda f, *a: at_exit.append((f, a)))
    src = "rows.parquet" if source_ok else "garbled.parquet"
    if not source_ok:
        (rows / src).write_bytes(b"not parquet")
    r = runner.invoke(app, ["verify", "out", "--source", src, "--cache-dir", "keep/new/cache", "-q", "--workers", "1"])
    assert r.exit_code == (0 if source_ok else 2), r.output
    for f, a in at_exit:  # what the process's exit would run
        f(*a)
    _made_folders_gone(rows)


def test_the_side_table_keeps_every_figure_at_80_columns():
    from packtool.cli.printing import side_table
    cols = [SimpleNamespace(name="old_logprobs", dtype="float32", width=1, kind="values", fill=0.0, fill_share=0.41,
                            fill_on_real_share=0.0, nan=12, inf=3, row=False),
            SimpleNamespace(name="support_of_the_sampler", dtype="int32", width=20, kind="support", fill=-1,
                            fill_share=0.6, fill_on_real_share=0.39, nan=0, inf=0, row=True),
            SimpleNamespace(name="greedy_support", dtype="int32", width=1, kind="support", fill=-1,
                            fill_share=0.6, fill_on_real_share=0.39, nan=0, inf=0, row=True)]
    for width in (80, 100, 160):
        con = Console(width=width, record=True)
        con.print(side_table(SimpleNamespace(side_columns=cols), con))
        text = con.export_text()
        assert "…" not in text and max(map(len, text.splitlines())) <= width, text
        for figure in ("20", "-1", "41.00%", "39.00%", "12 / 3", "float32", "support", "1 (row)"):
            assert figure in text, (figure, text)
