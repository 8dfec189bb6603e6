"""S39-8: a path made only of whitespace (`--cache-dir ' '`, `PACKTOOL_CACHE_DIR=' '`, `plan -o ' '`)
was a name: pack made a folder named ' ' in the working directory and put the tokenized cache
there, exit 0, and a message naming it showed nothing (`error: : is a folder`). It is refused as
'' is (params.blank, the one rule), in one line naming the flag, the argument or the variable,
before any work: every CLI path parameter, every library path argument, every write path,
TrainConfig's paths, and the PACKTOOL_* path variable (blank refused as RAY_ADDRESS is; empty is
unset, as a shell's `X=` means)."""
from __future__ import annotations

import os

import pytest
from test_empty_path_flags import _flag, _run, _write_paths
from test_home_paths import CASES

from packtool.errors import PacktoolError
from packtool.params import PATHS, path

BLANKS = {"space": " ", "spaces": "   ", "tab": "\t", "newline": "\n"}


@pytest.mark.parametrize("cmd, name", CASES)
@pytest.mark.parametrize("blank", ["space", "tab"])
def test_every_path_parameter_refuses_a_blank_path(cmd, name, blank, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, err, reached = _run(cmd, name, BLANKS[blank], monkeypatch, capsys)
    lines = err.strip().splitlines()
    assert code == 2 and not reached, (code, err, reached)
    assert len(lines) == 1 and lines[0].startswith("error: ") and "is blank" in lines[0], err
    assert f"{_flag(cmd, name)} " in lines[0] and "Traceback" not in err, err
    assert not list(tmp_path.iterdir())  # no folder named ' '


@pytest.mark.parametrize("name", sorted(PATHS))
@pytest.mark.parametrize("blank", BLANKS)
def test_every_library_path_argument_refuses_a_blank_path(name, blank):
    with pytest.raises(PacktoolError, match="is blank") as e:
        path(name, BLANKS[blank])
    assert name in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("where", ["check_new_file", "check_log_file", "resolve_folder",
                                   "TrainConfig.save", "TrainConfig.load", "TrainConfig.json_log"])
def test_library_write_paths_refuse_a_blank_path(where, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PacktoolError, match="is blank"):
        _write_paths()[where](" ")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("blank", BLANKS)
def test_a_blank_path_variable_is_refused_naming_it(blank, monkeypatch):
    from packtool.env import env_path
    monkeypatch.setenv("PACKTOOL_CACHE_DIR", BLANKS[blank])
    with pytest.raises(PacktoolError, match="PACKTOOL_CACHE_DIR=.* is blank") as e:
        env_path("PACKTOOL_CACHE_DIR")
    assert "\n" not in str(e.value)
    monkeypatch.setenv("PACKTOOL_CACHE_DIR", "")
    assert env_path("PACKTOOL_CACHE_DIR") is None  # empty is unset


@pytest.mark.parametrize("how", ["PACKTOOL_CACHE_DIR", "--cache-dir"])
def test_pack_with_a_blank_cache_root_makes_no_folder(how, tmp_path, monkeypatch):
    """The finding's example: the pack ran, exit 0, its cache in `./ /`."""
    from typer.testing import CliRunner

    from packtool.cli.app import app
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rows.jsonl").write_text('{"input_ids": [1, 2, 3], "loss_mask": [0, 1, 1]}\n')
    extra = ["--cache-dir", " "] if how == "--cache-dir" else []
    env = {"PACKTOOL_CACHE_DIR": " "} if how == "PACKTOOL_CACHE_DIR" else {}
    r = CliRunner().invoke(app, ["pack", "rows.jsonl", "-C", "64", "-q", "-o", "out", *extra], env=env)
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and how in lines[0] and "is blank" in lines[0], r.stderr
    assert sorted(os.listdir(tmp_path)) == ["rows.jsonl"]
