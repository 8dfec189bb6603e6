"""RA-4 (s49 review): `pack REPO --split S` with no --config reads the configuration datasets
picks (marked `default: true`, or named "default"), but the files datasets' one-kind-per-split
rule would leave out were judged against the README's FIRST configuration: that one's train
files were "left out" and the run refused with a cause that is not true. One configuration,
datasets' choice, for both questions."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from conftest import GPT2
from packtool.cli.app import app

pytest.importorskip("datasets")

# README form -> (the configuration datasets reads with no --config, its YAML)
READMES = {
    "default: true on the second": ("b", "- config_name: a\n  data_files:\n  - split: train\n    path: a/train-*\n"
                                         "- config_name: b\n  default: true\n  data_files:\n  - split: train\n"
                                         "    path: b/train-*\n"),
    "one named default, listed second": ("default", "- config_name: a\n  data_files:\n  - split: train\n"
                                                    "    path: a/train-*\n- config_name: default\n  data_files:\n"
                                                    "  - split: train\n    path: default/train-*\n"),
}


def _repo(tmp_path, form: str) -> tuple[str, str]:
    chosen, yaml = READMES[form]
    root = tmp_path / "repo"
    for name, rows in (("a", [[1, 2, 3]] * 3), (chosen, [[4, 5, 6, 7]] * 2)):
        (root / name).mkdir(parents=True)
        (root / name / "train-0.jsonl").write_text("".join(json.dumps({"input_ids": r}) + "\n" for r in rows))
    (root / "README.md").write_text(f"---\nconfigs:\n{yaml}---\n")
    return str(root), chosen


def _pack(args, tmp_path):
    r = CliRunner().invoke(app, ["pack", *args, "--tokenizer", GPT2, "-C", "64", "--dry-run", "--json",
                                 "--cache-dir", str(tmp_path / "cache")],
                           env={"HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp_path / "hf")})
    line = r.output.strip().splitlines()[-1]
    return r.exit_code, json.loads(line[line.index("{"):])


@pytest.mark.parametrize("form", READMES)
def test_the_split_is_judged_in_the_configuration_datasets_reads(tmp_path, form):
    repo, chosen = _repo(tmp_path, form)
    rc, got = _pack([repo, "--split", "train"], tmp_path)
    assert rc == 0 and "error" not in got, got
    rc, named = _pack([repo, "--split", "train", "--config", chosen], tmp_path)
    assert rc == 0 and got["segments"] == named["segments"] == 2, (got, named)  # its 2 rows, not a's 3


@pytest.mark.parametrize("form", READMES)
def test_a_file_of_another_kind_in_the_default_configurations_split_is_read(tmp_path, form):
    """Its README pattern takes it, so its rows are the split's (not "left out", nor a's judged)."""
    repo, chosen = _repo(tmp_path, form)
    with open(f"{repo}/{chosen}/train-1.csv", "w") as f:
        f.write("text\nheld row\n")
    rc, got = _pack([repo, "--split", "train"], tmp_path)
    assert rc == 0 and got["segments"] == 3, got
