"""S39-6: "would take it for a stray shard" was said of what is no stray shard: the packed
output's own manifest given as a file to write (`train --json-log base/.manifest.json`,
`inspect --html base/.manifest.json --overwrite`: replacing it destroys the output) and a packed
output given as the cache root (`--cache-dir base`: nothing there would be a shard). The one
message (output.relations.packed_problem) says what the path is: the output's manifest or one
of its files, or a tree of packtool's given as a cache root; a new file inside an output is still
a stray shard (tests/packing/test_write_paths.py)."""
from __future__ import annotations

import glob
import json
import os
from types import SimpleNamespace

import numpy as np
import pytest
from leftover_support import snapshot
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.errors import PacktoolOutputError

runner = CliRunner()


@pytest.fixture
def proj(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with open(tmp_path / "toks.jsonl", "w") as f:
        for i in range(40):
            f.write(json.dumps({"input_ids": list(range(1, 8 + i % 5))}) + "\n")
    np.save(tmp_path / "lengths.npy", np.arange(1, 60, dtype=np.int64))
    r = runner.invoke(app, ["pack", "toks.jsonl", "-C", "64", "--cache-dir", "cache", "-q", "-o", "packed"])
    assert r.exit_code == 0, r.output
    return tmp_path


def _write(what, target):
    """Writer `what` asked to replace `target` (CLI: exit code and stderr; train: its check)."""
    if what == "train --json-log":
        from packtool.megatron.loop import check_json_log
        pytest.importorskip("torch")
        try:
            check_json_log(SimpleNamespace(json_log=target, load=None, inputs=(), overwrite=True))
        except PacktoolOutputError as e:
            return 2, f"error: {e}"
        return 0, ""
    args = {"plan -o": ["plan", "--lengths", "lengths.npy", "-o", target, "--overwrite"],
            "inspect --html": ["inspect", "packed", "--html", target, "--overwrite", "-q"]}[what]
    r = runner.invoke(app, args)
    return r.exit_code, r.stderr


@pytest.mark.parametrize("file, said", [("manifest", "is the manifest of the packed output"),
                                        ("shard", "is a file of the packed output")])
@pytest.mark.parametrize("what", ["plan -o", "inspect --html", "train --json-log"])
def test_an_outputs_own_file_is_named_as_such(proj, what, file, said):
    target = "packed/.manifest.json" if file == "manifest" else os.path.relpath(
        sorted(glob.glob(str(proj / "packed" / "slabs-*.parquet")))[0], proj)
    before = snapshot(proj / "packed")
    code, err = _write(what, target)
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert said in lines[0] and "destroy that output" in lines[0] and "stray shard" not in lines[0], lines[0]
    assert lines[0].startswith(f"error: {target}: ")
    assert snapshot(proj / "packed") == before
    assert runner.invoke(app, ["verify", "packed", "-q"]).exit_code == 0


@pytest.mark.parametrize("how", ["--cache-dir", "PACKTOOL_CACHE_DIR"])
@pytest.mark.parametrize("tree, said", [("packed", "is a packed output folder, not a cache root"),
                                        ("entry", "is a tokenized cache entry, not a cache root")])
def test_a_tree_of_packtools_given_as_the_cache_root(proj, tree, said, how):
    root = "packed" if tree == "packed" else os.path.relpath(
        os.path.dirname(glob.glob(str(proj / "cache" / "**" / "cache.json"), recursive=True)[0]), proj)
    before = snapshot(proj)
    extra = ["--cache-dir", root] if how == "--cache-dir" else []
    env = {"PACKTOOL_CACHE_DIR": root} if how == "PACKTOOL_CACHE_DIR" else {}
    r = runner.invoke(app, ["pack", "toks.jsonl", "-C", "64", "-q", "-o", "other", *extra], env=env)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.exit_code == 2 and len(lines) == 1, r.output
    assert said in lines[0] and "stray shard" not in lines[0] and how in lines[0], lines[0]
    assert snapshot(proj) == before and not os.path.exists(proj / "other")
