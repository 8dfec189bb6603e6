"""A local Hugging Face dataset repo folder given without --split (S44-14): what `hf download
--repo-type dataset NAME --local-dir DIR` leaves (README `configs:`, data/train-* + data/test-*,
per-config folders, split folders, train/dev file names) was packed as a plain folder, every
configuration and split, test rows too, rc 0. Now each layout is one line naming its splits (and
configurations) and the flags to pass, exit 2, through the CLI and the library; with the flags
the right rows are read; a folder of data files that name one split at most is read as before."""
from __future__ import annotations

import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from packtool.align import Alignment
from packtool.cli.app import app
from packtool.errors import PacktoolInputError
from packtool.tokenize.config import TokenizeConfig

TRAIN, TEST = 5, 3  # rows per split; train rows are 4 tokens, test rows 2

README = """---
configs:
- config_name: main
  data_files:
  - split: train
    path: main/train-*
  - split: test
    path: main/test-*
- config_name: socratic
  data_files:
  - split: train
    path: socratic/train-*
  - split: test
    path: socratic/test-*
---
# a dataset card
"""
ONE_CONFIG = "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n    path: data/train-*\n---\n"


def _rows(split):
    return pa.table({"input_ids": [[1, 2, 3, 4]] * TRAIN if split == "train" else [[7, 8]] * TEST})


def _write(root, rel, split):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if rel.endswith(".jsonl"):
        path.write_text("".join(json.dumps({"input_ids": r}) + "\n" for r in _rows(split)["input_ids"].to_pylist()))
    else:
        pq.write_table(_rows(split), path)


# name: (files {path: split}, README text, folder passed (below the root), words in the line, CLI fix flags)
LAYOUTS = {
    "README configs": ({f"{c}/{s}-00000-of-00001.parquet": s for c in ("main", "socratic") for s in ("train", "test")},
                       README, "", "configurations main, socratic", ["--split", "train", "--config", "main"]),
    "README, one config": ({"data/train-00000-of-00001.parquet": "train"}, ONE_CONFIG, "",
                           "configurations default", ["--split", "train"]),
    "data/ split files": ({"data/train-00000-of-00001.parquet": "train", "data/test-00000-of-00001.parquet": "test"},
                          None, "", "splits test, train", ["--split", "train"]),
    "per-config folders": ({f"{c}/{s}-00000-of-00001.parquet": s for c in ("main", "socratic") for s in ("train", "test")},
                           None, "", "splits test, train", ["--split", "train"]),
    "one config's folder": ({f"main/{s}-00000-of-00001.parquet": s for s in ("train", "test")}, README, "main",
                            "splits test, train", ["--split", "train"]),
    "split folders": ({"train/a.jsonl": "train", "test/a.jsonl": "test"}, None, "", "splits test, train",
                      ["--split", "train"]),
    "train/dev files": ({"train.jsonl": "train", "dev.jsonl": "validation"}, None, "", "splits train, validation",
                        ["--split", "train"]),
}


def _repo(tmp_path, name):
    files, readme, sub, _, _ = LAYOUTS[name]
    root = tmp_path / "repo"
    for rel, split in files.items():
        _write(root, rel, split)
    if readme:
        (root / "README.md").write_text(readme)
    return str(root / sub) if sub else str(root)


def _last(r) -> dict:
    line = r.output.strip().splitlines()[-1]
    return json.loads(line[line.index("{"):])  # after any datasets progress bar on stderr


def _cli(args, tmp_path):
    return CliRunner().invoke(app, ["pack", *args, "-C", "64", "--dry-run", "--json",
                                    "--cache-dir", str(tmp_path / "cache")])


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_cli_refuses_a_repo_folder_naming_its_splits_and_flags(tmp_path, name):
    path = _repo(tmp_path, name)
    r = _cli([path], tmp_path)
    assert r.exit_code == 2, r.output
    err = _last(r)["error"]
    msg = err["message"]
    assert LAYOUTS[name][3] in msg and "pass " + " ".join(LAYOUTS[name][4]) in msg, msg
    # S49A-10: --split was not given: the flag at fault is the positional input's (null), not one the fix names
    assert "\n" not in msg and err["path"] == path and err["flag"] is None, err


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_library_refuses_a_repo_folder(tmp_path, name):
    from packtool import pack
    path = _repo(tmp_path, name)
    with pytest.raises(PacktoolInputError) as e:
        pack([path], Alignment(capacity=64), tokenize=TokenizeConfig(), dry_run=True, cache_dir=str(tmp_path / "c"))
    fix = "split='train', config='main' with" if "--config" in LAYOUTS[name][4] else "split='train' with"
    assert LAYOUTS[name][3] in str(e.value) and fix in str(e.value) and "--split" not in str(e.value), str(e.value)


@pytest.mark.parametrize("name", ["README configs", "data/ split files", "split folders"])
def test_the_named_flags_read_the_train_rows(tmp_path, monkeypatch, name):
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    r = _cli([_repo(tmp_path, name), *LAYOUTS[name][4]], tmp_path)
    assert r.exit_code == 0, r.output
    stats = _last(r)
    assert stats["sequences"] == TRAIN, stats  # one config's train rows, not test's, not twice


# folders of data files that are no dataset repo: read as every file in them, as before
PLAIN = {
    "no split words": {"a.jsonl": "train", "b.jsonl": "test"},
    "one split's shards": {"train-0.jsonl": "train", "train-1.jsonl": "train"},
    "words inside names": {"constraint.jsonl": "train", "attest.jsonl": "test", "interval.jsonl": "train"},
}


@pytest.mark.parametrize("name", sorted(PLAIN))
@pytest.mark.parametrize("readme", [None, "# notes\n", "---\nlicense: mit\n---\n"])
def test_plain_folders_are_read_whole(tmp_path, name, readme):
    root = tmp_path / "evaluation"  # the folder's own name is not one of its files' splits
    for rel, split in PLAIN[name].items():
        _write(root, rel, split)
    if readme:
        (root / "README.md").write_text(readme)
    r = _cli([str(root)], tmp_path)
    assert r.exit_code == 0, r.output
    want = sum(TRAIN if s == "train" else TEST for s in PLAIN[name].values())
    assert _last(r)["sequences"] == want, r.output


def test_a_glob_of_one_splits_files_is_read(tmp_path):
    path = _repo(tmp_path, "README configs")
    r = _cli([f"{path}/main/train-*"], tmp_path)
    assert r.exit_code == 0, r.output
    assert _last(r)["sequences"] == TRAIN, r.output


def _options(command: str) -> set[str]:
    import typer.main
    params = typer.main.get_command(app).commands[command].params
    return {o for p in params for o in (*p.opts, *p.secondary_opts) if o.startswith("-")}


@pytest.fixture(scope="module")
def packed_train(tmp_path_factory):
    """A packed output of the train rows (what `pack REPO --split train` makes), for verify --source."""
    t = tmp_path_factory.mktemp("vt")
    _write(t, "train.jsonl", "train")
    r = CliRunner().invoke(app, ["pack", str(t / "train.jsonl"), "-C", "64", "-q", "-o", str(t / "out"),
                                 "--cache-dir", str(t / "c")])
    assert r.exit_code == 0, r.output
    return str(t / "out")


def _verify(args, tmp_path):
    return CliRunner().invoke(app, ["verify", *args, "--json", "--cache-dir", str(tmp_path / "cache")])


# S49A-10: every fix names a flag of the command that raised it. `verify OUT --source REPO` was told
# "pass --split train" (verify has none: "No such option"), its --json flag `--split`, never given;
# an empty input under verify "check ... --split for a dataset" too. verify's line offers what it takes.
VERIFY_DOORS = {**{f"a repo folder: {n}": n for n in LAYOUTS}, "an empty input": None}


@pytest.mark.parametrize("door", sorted(VERIFY_DOORS))
def test_verify_source_fixes_name_only_verify_flags(tmp_path, packed_train, door):
    name = VERIFY_DOORS[door]
    if name is None:
        (tmp_path / "empty.jsonl").write_text("")
        given = str(tmp_path / "empty.jsonl")
    else:
        given = _repo(tmp_path, name)
    r = _verify([packed_train, "--source", given], tmp_path)
    assert r.exit_code == 2, r.output
    err = _last(r)["error"]
    said = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", err["message"]))
    assert said <= _options("verify"), (said - _options("verify"), err)
    assert err["flag"] == "--source", err  # the flag that gave the folder, never one suggested
    if name is None:
        return
    named = err["message"][err["message"].index("pass that split's files alone (") + 31:-1]
    if not named.startswith(given):  # README configs without data_files: no file pattern to name
        return
    r = _verify([packed_train, "--source", named], tmp_path)
    assert r.exit_code == 0, r.output  # the named split's files are the rows packed


def test_offline_name_says_to_pass_the_folder_with_split_and_config(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    r = _cli(["nobody-here/no-such-dataset"], tmp_path)
    assert r.exit_code == 2, r.output
    msg = _last(r)["error"]["message"]
    assert "pass DIR with --split SPLIT (and --config CONFIG" in msg, msg


# ---- the same rule for a store prefix (L4): given, or matched by a glob, as a folder is

def _on_store(tmp_path, s3, files: dict, readme: str | None, sub: str = "") -> str:
    """The layout's objects under `s3://BUCKET/repo/`; the URI of the prefix passed."""
    from packtool.storage import locate
    root = tmp_path / "up"
    for rel, split in files.items():
        _write(root, rel, split)
    if readme:
        (root / "README.md").write_text(readme)
    for f in root.rglob("*"):
        if f.is_file():
            locate(f"{s3}/repo/{f.relative_to(root).as_posix()}").write_bytes(f.read_bytes())
    return f"{s3}/repo" + (f"/{sub}" if sub else "")


def _glob_of(uri: str) -> str:
    return uri[:-1] + "*"  # s3://b/repo -> s3://b/rep*: the glob matches the prefix, read whole


HOW = {"prefix": lambda uri: uri, "glob matching it": _glob_of}


@pytest.mark.parametrize("how", sorted(HOW))
@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_a_repo_prefix_on_a_store_is_refused_and_its_named_objects_read(tmp_path, s3, name, how):
    files, readme, sub, words, _ = LAYOUTS[name]
    uri = _on_store(tmp_path, s3, files, readme, sub)
    r = _cli([HOW[how](uri)], tmp_path)
    assert r.exit_code == 2, r.output
    err = _last(r)["error"]
    msg = err["message"]
    assert words in msg and "\n" not in msg and err["path"] == uri, err
    assert "--split" not in msg, msg  # --split reads no store URI: the fix is the split's objects
    named = msg[msg.index("pass that split's objects alone (") + 33:-1]
    assert named.startswith(uri + "/"), msg
    r = _cli([named], tmp_path)
    assert r.exit_code == 0, r.output
    assert _last(r)["sequences"] == TRAIN, r.output  # one config's train rows, not test's, not twice


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_the_files_a_refused_folder_names_read_its_train_rows(tmp_path, name):
    """The local line's other fix, `or name that split's files (...)`, where it gives one."""
    r = _cli([_repo(tmp_path, name)], tmp_path)
    msg = _last(r)["error"]["message"]
    if "name that split's files (" not in msg:
        pytest.skip("no file pattern to name (README configs without data_files)")
    named = msg[msg.index("name that split's files (") + 25:-1]
    r = _cli([named], tmp_path)
    assert r.exit_code == 0, r.output
    assert _last(r)["sequences"] == TRAIN, r.output


@pytest.mark.parametrize("how", sorted(HOW))
@pytest.mark.parametrize("name", sorted(PLAIN))
def test_plain_prefixes_are_read_whole(tmp_path, s3, name, how):
    uri = _on_store(tmp_path, s3, PLAIN[name], "---\nlicense: mit\n---\n")
    r = _cli([HOW[how](uri)], tmp_path)
    assert r.exit_code == 0, r.output
    want = sum(TRAIN if s == "train" else TEST for s in PLAIN[name].values())
    assert _last(r)["sequences"] == want, r.output


TWO_PATTERNS = ("---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n"
                "    path: [a/train-*, b/train-*]\n  - split: test\n    path: [a/test-*, b/test-*]\n---\n")


@pytest.mark.parametrize("door", ["folder", "prefix"])
def test_a_split_of_several_patterns_is_named_by_every_one(tmp_path, s3, door):
    """RA-15: a README split of several patterns was named by its first: following the fix packed
    part of the split, rc 0. Every pattern is named; read, they give datasets' split, all of it."""
    from packtool.tokenize.repo_folder import split_files
    files = {f"{p}/{s}-0.parquet": s for p in ("a", "b") for s in ("train", "test")}
    local = _repo_of(tmp_path / "repo", files, TWO_PATTERNS)
    given = local if door == "folder" else _on_store(tmp_path, s3, files, TWO_PATTERNS)
    msg = _last(_cli([given], tmp_path))["error"]["message"]
    lead = "name that split's files (" if door == "folder" else "pass that split's objects alone ("
    named = msg[msg.index(lead) + len(lead):msg.rindex(")")].split(" ")
    r = _cli(named, tmp_path)
    assert r.exit_code == 0, r.output
    assert _last(r)["sequences"] == TRAIN * len(split_files(local, "train", None)) == 2 * TRAIN, (named, r.output)


def _repo_of(root, files: dict, readme: str) -> str:
    for rel, split in files.items():
        _write(root, rel, split)
    (root / "README.md").write_text(readme)
    return str(root)
