"""Stranger 37 S37-7 / S37-8: an empty value of a path flag (`--save "$CKPT"` with CKPT unset) was
read as "not given": `train --save ''` trained and saved nothing, exit 0 (so --json-log, --load,
--config, plan -o, inspect --html/--plan/--lengths); `pack ''` was an internal error. And
`-o '~nosuchuser/x'` made a folder named `~nosuchuser` here while `~root/x` went to /root.
Every path parameter of every subcommand (flags.PATH_PARAMS) is refused empty or with a `~user`
of no user, in one line naming it, before any work (cli.path_flags, from failure.guarded); the
library's path arguments, TrainConfig's and every write path (output.paths) refuse them too.
Stop 37's Left 4: a `~` path under HOME='' (or a HOME that is no absolute path) is refused the
same way: Python's expanduser made `~/x` `/x`, a folder at the file system's root."""
from __future__ import annotations

import pytest
import typer
import typer.main
from test_home_paths import CASES, _argv

from packtool.cli import store_flags
from packtool.cli.app import app
from packtool.errors import PacktoolError
from packtool.params import PATHS, path

NO_USER = "~nosuchuser-packtool/p"
# value, HOME (None: as it is), what the one line says
VALUES = {"empty": ("", None, "is empty"), "~user of no user": (NO_USER, None, "no user 'nosuchuser-packtool'"),
          "~ under HOME=''": ("~/p", "", "starts with ~, but HOME is empty"),
          "~ under HOME=' '": ("~/p", " ", "starts with ~, but HOME is empty"),
          "~ under a relative HOME": ("~/p", "home", "but HOME is 'home', not an absolute path")}


def _home(monkeypatch, home):
    if home is not None:
        monkeypatch.setenv("HOME", home)


def _run(cmd: str, name: str, value: str, monkeypatch, capsys) -> tuple[int, str, dict]:
    """The command line with `name` given `value`; the work past the path checks is never run:
    the check after them (the store flags') records what the command would get and stops."""
    reached = {}

    def stop(command, args):
        reached.update(args)
        raise typer.Exit(0)
    monkeypatch.setattr(store_flags, "check_store_flags", stop)
    group = typer.main.get_command(app)
    param = next(p for p in group.commands[cmd].params if p.name == name)
    argv = [value if a == "~/p" else a for a in _argv(cmd, param)]
    code = group.main(argv, prog_name="packtool", standalone_mode=False)
    return code, capsys.readouterr().err, reached


def _flag(cmd: str, name: str) -> str:
    param = next(p for p in typer.main.get_command(app).commands[cmd].params if p.name == name)
    if param.param_type_name == "argument":
        return {"directory": "DIR", "data_dir": "DATA_DIR", "inputs": "INPUTS"}[name]
    return max(param.opts, key=len)


@pytest.mark.parametrize("cmd, name", CASES)
@pytest.mark.parametrize("case", VALUES)
def test_every_path_parameter_refuses_an_empty_or_unknown_home_before_any_work(cmd, name, case,
                                                                                 tmp_path, monkeypatch, capsys):
    value, home, said = VALUES[case]
    monkeypatch.chdir(tmp_path)
    _home(monkeypatch, home)
    code, err, reached = _run(cmd, name, value, monkeypatch, capsys)
    lines = err.strip().splitlines()
    assert code == 2 and not reached, (code, err, reached)
    assert len(lines) == 1 and lines[0].startswith("error: ") and said in lines[0], err
    assert f"{_flag(cmd, name)} " in lines[0] and "Traceback" not in err, err
    assert not list(tmp_path.iterdir())  # no literal `~nosuchuser-packtool` folder made


@pytest.mark.parametrize("name", sorted(PATHS))
@pytest.mark.parametrize("case", VALUES)
def test_every_library_path_argument_refuses_an_empty_or_unknown_home(name, case, monkeypatch):
    value, home, said = VALUES[case]
    _home(monkeypatch, home)
    with pytest.raises(PacktoolError, match=said) as e:
        path(name, value)
    assert str(e.value).count(name) >= 1 and "\n" not in str(e.value)


def _write_paths():
    from packtool.megatron.loop import TrainConfig
    from packtool.output.files import check_log_file, check_new_file, resolve_folder
    return {"check_new_file": lambda v: check_new_file(v, "html"),
            "check_log_file": lambda v: check_log_file(v, "json_log"),
            "resolve_folder": lambda v: resolve_folder(v, "save"),
            **{f"TrainConfig.{n}": (lambda n: lambda v: TrainConfig("out", **{n: v}))(n)
               for n in ("save", "load", "json_log")}}


@pytest.mark.parametrize("where", ["check_new_file", "check_log_file", "resolve_folder",
                                   "TrainConfig.save", "TrainConfig.load", "TrainConfig.json_log"])
def test_library_write_paths_refuse_an_empty_path(where, tmp_path, monkeypatch):
    """'' resolved to the working directory ("is a folder", naming no path) or, in TrainConfig,
    read as "not given": a library train saved nothing without a word."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PacktoolError, match="is empty"):
        _write_paths()[where]("")


@pytest.mark.parametrize("where", ["check_new_file", "check_log_file", "resolve_folder",
                                   "TrainConfig.save", "TrainConfig.load", "TrainConfig.json_log"])
def test_library_write_paths_refuse_a_home_path_under_an_empty_home(where, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", "")
    with pytest.raises(PacktoolError, match="starts with ~, but HOME is empty") as e:
        _write_paths()[where]("~/p")
    assert "\n" not in str(e.value)


def _expansions():
    """Every other place packtool expands `~` (each through params.expanded now)."""
    from packtool.env import env_path
    from packtool.output.paths import resolve
    from packtool.output.relations import input_paths, real_path
    from packtool.storage import locate
    return {"storage.locate": lambda: locate("~/p", name="output"), "output.paths.resolve": lambda: resolve("~/p"),
            "output.relations.real_path": lambda: real_path("~/p"),
            "output.relations.input_paths": lambda: input_paths(["~/p"]),
            "env.env_path": lambda: env_path("PACKTOOL_CACHE_DIR")}


@pytest.mark.parametrize("where", ["storage.locate", "output.paths.resolve", "output.relations.real_path",
                                   "output.relations.input_paths", "env.env_path"])
def test_every_expansion_of_home_refuses_an_empty_home(where, monkeypatch):
    monkeypatch.setenv("HOME", "")
    monkeypatch.setenv("PACKTOOL_CACHE_DIR", "~/p")
    with pytest.raises(PacktoolError, match="starts with ~, but HOME is empty") as e:
        _expansions()[where]()
    assert "\n" not in str(e.value)
    if where in ("storage.locate", "env.env_path"):  # named where the caller names it
        assert f"{'output' if where == 'storage.locate' else 'PACKTOOL_CACHE_DIR'} starts with ~" in str(e.value)


def test_an_error_naming_a_place_never_takes_a_home_path_for_the_root(monkeypatch):
    from packtool.cli.places import _key
    monkeypatch.setenv("HOME", "")
    assert _key("~/p") != "/p"
