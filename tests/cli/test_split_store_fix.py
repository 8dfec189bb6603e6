"""S48A-15: `pack s3://b/repo --split train` on a store repo whose objects name their split
(`repo/data/train-00000.jsonl`) said "pass the split's own prefix (s3://b/repo/train/)", a prefix
that does not exist (following it: "input not found"); by a glob the fix was the glob's text with
`/train/` appended. --split reads no store URI; its line now names what reads that split alone,
from the prefix's listing, as the refusal without --split names it: the split's own prefix only
where a DatasetDict was saved there. Each fix read without --split gives that split's rows alone."""
from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.storage import locate

ROWS = {"train": 5, "test": 3}
README = ("---\nconfigs:\n- config_name: main\n  data_files:\n  - split: train\n    path: main/train-*\n"
          "  - split: test\n    path: main/test-*\n---\n")
# layout: ({object below the prefix: its split}, {split: the fix below the prefix})
LAYOUTS = {
    "split-named files": ({"data/train-00000.jsonl": "train", "data/test-00000.jsonl": "test"},
                          {"train": "data/train*", "test": "data/test*"}),
    "README configs": ({"main/train-0.jsonl": "train", "main/test-0.jsonl": "test", "README.md": None},
                       {"train": "main/train-*", "test": "main/test-*"}),
    "split partitions": ({"split=train/part-0.json": "train", "split=test/part-0.json": "test"},
                         {"train": "split=train/", "test": "split=test/"}),
    "a DatasetDict saved": ({"train": "train", "test": "test", "dataset_dict.json": None},
                            {"train": "train/", "test": "test/"}),
}


def _upload(s3, tmp_path, layout: str) -> None:
    for rel, split in LAYOUTS[layout][0].items():
        if rel in ("train", "test"):  # a save_to_disk split: its files
            datasets = pytest.importorskip("datasets")
            local = tmp_path / "dd" / rel
            datasets.Dataset.from_dict({"input_ids": [[1, 2, 3, 4] if split == "train" else [7, 8]] * ROWS[split]}
                                       ).save_to_disk(str(local))
            for f in os.listdir(local):
                locate(f"{s3}/in/repo/{rel}/{f}").write_bytes((local / f).read_bytes())
            continue
        body = README if rel == "README.md" else json.dumps({"splits": ["train", "test"]}) if split is None else \
            (json.dumps({"input_ids": [1, 2, 3, 4] if split == "train" else [7, 8]}) + "\n") * ROWS[split]
        locate(f"{s3}/in/repo/{rel}").write_bytes(body.encode())


def _cli(args, tmp_path):
    r = CliRunner().invoke(app, ["pack", *args, "-C", "64", "--dry-run", "--json",
                                 "--cache-dir", str(tmp_path / "cache")])
    line = r.output.strip().splitlines()[-1]
    return r.exit_code, json.loads(line[line.index("{"):])


DOORS = {"the prefix": "in/repo", "the prefix with its /": "in/repo/", "a glob matching it": "in/rep*"}


@pytest.mark.parametrize("split", sorted(ROWS))
@pytest.mark.parametrize("door", sorted(DOORS))
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_split_on_a_store_repo_names_that_splits_objects(tmp_path, s3, layout, door, split):
    _upload(s3, tmp_path, layout)
    rc, out = _cli([f"{s3}/{DOORS[door]}", "--split", split], tmp_path)
    err = out.get("error") or {}
    assert rc == 2 and err.get("flag") == "--split", out
    want = f"{s3}/in/repo/{LAYOUTS[layout][1][split]}"
    assert f"pass that split's objects alone ({want}) without --split" in err["message"], err
    rc, out = _cli([want], tmp_path)
    assert rc == 0 and out["sequences"] == ROWS[split], out  # that split's rows alone


def test_a_prefix_naming_no_split_says_so(tmp_path, s3):
    locate(f"{s3}/in/plain/a.jsonl").write_bytes(b'{"input_ids": [1, 2]}\n')
    rc, out = _cli([f"{s3}/in/plain", "--split", "train"], tmp_path)
    err = out["error"]
    assert rc == 2 and "no object below it names split train" in err["message"], err
    assert "/train/" not in err["message"], err  # no prefix that is not there


# RA-3 / RA-15: which configuration and which of its files the fix names, by the rule datasets reads
# the same repo with (split_files on its local copy: the one owner of that answer locally)
_EN_FR = {f"{lang}/{s}.jsonl": n for lang, base in (("en", 1), ("fr", 4)) for s, n in (("train", base), ("test", base + 1))}
_AB = {f"{part}/{s}.jsonl": n for part, base in (("a", 1), ("b", 3)) for s, n in (("train", base), ("test", base + 1))}


def _card(*configs: str) -> str:
    return "---\nconfigs:\n" + "".join(configs) + "---\n# repo\n"


def _config(name: str, paths: dict, default: bool = False) -> str:
    return (f"- config_name: {name}\n" + ("  default: true\n" if default else "") + "  data_files:\n"
            + "".join(f"  - split: {s}\n    path: {p}\n" for s, p in paths.items()))


_EN = {"train": "en/train.jsonl", "test": "en/test.jsonl"}
_FR = {"train": "fr/train.jsonl", "test": "fr/test.jsonl"}
# name -> (objects: rows each, README, flags): datasets reads one configuration, its every pattern
CONFIG_LAYOUTS = {
    "default: true, --config the other": (_EN_FR, _card(_config("en", _EN, True), _config("fr", _FR)),
                                          ["--config", "fr"]),
    "default: true, no --config": (_EN_FR, _card(_config("fr", _FR), _config("en", _EN, True)), []),
    "a configuration named default, second": (_EN_FR, _card(_config("en", _EN), _config("default", _FR)), []),
    "the only configuration": (_EN_FR, _card(_config("fr", _FR)), []),
    "a split of two patterns": (_AB, _card(_config("default", {"train": "[a/train.jsonl, b/train.jsonl]",
                                                               "test": "[a/test.jsonl, b/test.jsonl]"})), []),
    "a split of a pattern list, one a glob": (_AB, _card(_config("default", {
        "train": "[a/train.jsonl, 'b/tr*']", "test": "[a/test.jsonl, 'b/te*']"})), []),
}


def _repo(s3, tmp_path, objects: dict, readme: str) -> str:
    local = tmp_path / "repo"
    for rel, n in {**objects, "README.md": None}.items():
        body = readme if n is None else (json.dumps({"input_ids": [1, 2, 3]}) + "\n") * n
        (local / rel).parent.mkdir(parents=True, exist_ok=True)
        (local / rel).write_text(body)
        locate(f"{s3}/in/repo/{rel}").write_bytes(body.encode())
    return str(local)


def _library(uri, split, config):
    import packtool
    from packtool.errors import PacktoolError
    from packtool.tokenize.config import TokenizeConfig
    try:
        packtool.pack([uri], split=split, config=config, tokenize=TokenizeConfig(shape="tokens"), dry_run=True)
    except PacktoolError as e:
        return type(e).__name__, str(e), e.flag
    return None


@pytest.mark.parametrize("door", ["command line", "library"])
@pytest.mark.parametrize("layout", sorted(CONFIG_LAYOUTS))
def test_the_split_fix_names_every_file_of_the_configuration_datasets_reads(tmp_path, s3, layout, door):
    from packtool.tokenize.repo_folder import split_files
    split = "test"  # the rows a wrong fix would leak (train's lines are built by the same code)
    objects, readme, flags = CONFIG_LAYOUTS[layout]
    local = _repo(s3, tmp_path, objects, readme)
    config = flags[1] if flags else None
    read = split_files(local, split, config)  # what datasets reads of the same repo
    want_rows = sum(objects[os.path.relpath(f, local).replace(os.sep, "/")] for f in read)
    if door == "command line":
        rc, out = _cli([f"{s3}/in/repo", "--split", split, *flags], tmp_path)
        err = out.get("error") or {}
        assert rc == 2 and err.get("flag") == "--split" and err.get("kind") == "config", out
        message = err["message"]
    else:
        kind, message, flag = _library(f"{s3}/in/repo", split, config)
        assert kind == "PacktoolConfigError" and flag is None, message
        assert "without split" in message, message
    fix = message[message.index("pass that split's objects alone (") + 33:].split(") without")[0].split(" ")
    rc, out = _cli(fix, tmp_path)
    assert rc == 0 and out["sequences"] == want_rows, (fix, out)  # that split's rows, all of them


def test_no_default_configuration_names_each_ones_objects(tmp_path, s3):
    _repo(s3, tmp_path, _EN_FR, _card(_config("en", _EN), _config("fr", _FR)))
    rc, out = _cli([f"{s3}/in/repo", "--split", "test"], tmp_path)
    message = out["error"]["message"]
    assert rc == 2 and (f"pass one configuration's test objects alone (en: {s3}/in/repo/en/test.jsonl; "
                        f"fr: {s3}/in/repo/fr/test.jsonl) without --split") in message, message
    rc, out = _cli([f"{s3}/in/repo", "--split", "test", "--config", "de"], tmp_path)
    message = out["error"]["message"]
    assert rc == 2 and "declares no configuration de (it declares en, fr)" in message, message
