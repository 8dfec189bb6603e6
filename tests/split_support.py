"""What the tests of split layouts share (a folder of splits saved one by one, a folder partitioned
by split): a `pack --dry-run --json` through the CLI, and the store door's one body, which
test_partitioned_splits and test_saved_split_folders each kept a copy of (D1)."""
from __future__ import annotations

import json

from conftest import upload_tree
from typer.testing import CliRunner

# store door: (the input given, the prefix the line names), below s3://BUCKET; NAME is the layout's
# prefix (in/NAME), GLOB a glob matching it
STORE = {"the prefix": ("in/NAME", "in/NAME"), "a glob matching it": ("in/GLOB", "in/NAME"),
         "a prefix holding it": ("in/", "in")}


def cli(args, tmp_path) -> tuple[int, dict]:
    """`pack ARGS -C 64 --dry-run --json`: its exit status and its --json object."""
    from packtool.cli.app import app
    r = CliRunner().invoke(app, ["pack", *args, "-C", "64", "--dry-run", "--json",
                                 "--cache-dir", str(tmp_path / "cache")], env={"HF_HUB_OFFLINE": "1"})
    line = r.output.strip().splitlines()[-1]
    return r.exit_code, json.loads(line[line.index("{"):])  # after any datasets progress bar


def store_door_refused(tmp_path, s3, build, name: str, door: str, words: str, fix_of, rows: int) -> str:
    """The layout `build(folder)` writes, put under s3://BUCKET/in/NAME and given by `door`: refused
    in one line holding `words` and naming the prefix the door reaches; the URI the line's fix
    names (`fix_of(message)`) reads `rows` rows (the train split's alone). Returns that URI."""
    build(tmp_path / "up")
    upload_tree(str(tmp_path / "up"), f"{s3}/in/{name}")
    given, named = (f"{s3}/{p.replace('NAME', name).replace('GLOB', name[0] + '*')}" for p in STORE[door])
    rc, out = cli([given], tmp_path)
    err = out.get("error") or {}
    assert rc == 2 and words in err.get("message", ""), out
    assert "\n" not in err["message"] and err["path"] == named, err
    fix = fix_of(err["message"])
    rc, out = cli([fix], tmp_path)
    assert rc == 0 and out["sequences"] == rows, out
    return fix
