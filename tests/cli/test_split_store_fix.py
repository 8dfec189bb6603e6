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
