"""S48A-9: splits saved one by one with save_to_disk (`ds["train"].save_to_disk("sd/train")`,
`ds["test"].save_to_disk("sd/test")`: no dataset_dict.json) given as a folder packed every split,
the test rows too, rc 0, no note: the folder door judged the split rule on the files it reads one
by one, and took the save_to_disk folders below it whole before the rule saw them. The same
layout on a store prefix, and as JSON Lines or bare Arrow files, was refused. Now every door
refuses it naming the splits, and the fix each line gives reads the train rows alone."""
from __future__ import annotations

import json
import os

import pytest
from split_support import STORE, cli, store_door_refused

datasets = pytest.importorskip("datasets")

from packtool.align import Alignment  # noqa: E402
from packtool.errors import PacktoolInputError  # noqa: E402
from packtool.tokenize.config import TokenizeConfig  # noqa: E402

TRAIN, TEST = 5, 3
# layout: (the split folders below the folder given, the splits the line names)
LAYOUTS = {"train/ + test/": (("train", "test"), "splits test, train"),
           "train/ + validation/": (("train", "validation"), "splits train, validation"),
           "data/train/ + data/test/": (("data/train", "data/test"), "splits test, train")}


def _save(root, layout: str) -> None:
    for sub in LAYOUTS[layout][0]:
        n, ids = (TRAIN, [1, 2, 3, 4]) if sub.endswith("train") else (TEST, [7, 8])
        datasets.Dataset.from_dict({"input_ids": [ids] * n}).save_to_disk(str(root / sub))


@pytest.fixture(autouse=True)
def _datasets_cache(monkeypatch, tmp_path):
    """`--split` on such a folder is read by datasets, which writes its Arrow conversion here."""
    import datasets.config
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf"))


# local door: (the input given, the path the line names), below tmp_path/in (the layout in in/sd)
LOCAL = {"the folder": ("in/sd", "in/sd"), "a folder holding it": ("in", "in"),
         "a glob matching the folder": ("in/s*", "in/sd")}


@pytest.mark.parametrize("door", sorted(LOCAL))
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_folder_of_saved_splits_is_refused_and_its_fixes_read_the_train_rows(tmp_path, layout, door):
    _save(tmp_path / "in" / "sd", layout)
    given, named = (str(tmp_path / p) for p in LOCAL[door])
    rc, out = cli([given], tmp_path)
    err = out.get("error") or {}
    assert rc == 2 and LAYOUTS[layout][1] in err.get("message", ""), out
    # --split was not given: the flag at fault is the positional input's (null), never one the fix names (S49A-10)
    assert "\n" not in err["message"] and err["path"] == named and err["flag"] is None, err
    assert "pass --split train" in err["message"], err
    rc, out = cli([named, "--split", "train"], tmp_path)
    assert rc == 0 and out["sequences"] == TRAIN, out  # the train rows, not the test ones
    files = err["message"][err["message"].index("name that split's files (") + 25:-1]
    rc, out = cli([files], tmp_path)
    assert rc == 0 and out["sequences"] == TRAIN, out


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_the_library_refuses_a_folder_of_saved_splits(tmp_path, layout):
    from packtool import pack
    _save(tmp_path / "sd", layout)
    with pytest.raises(PacktoolInputError) as e:
        pack([str(tmp_path / "sd")], Alignment(capacity=64), tokenize=TokenizeConfig(), dry_run=True,
             cache_dir=str(tmp_path / "c"))
    assert LAYOUTS[layout][1] in str(e.value) and "split='train'" in str(e.value), str(e.value)


@pytest.mark.parametrize("door", sorted(STORE))
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_the_same_splits_on_a_store_are_refused_alike(tmp_path, s3, layout, door):
    store_door_refused(tmp_path, s3, lambda d: _save(d, layout), "sd", door, LAYOUTS[layout][1],
                       lambda m: m[m.index("pass that split's objects alone (") + 33:-1], TRAIN)


def test_one_saved_split_beside_plain_files_is_read_whole(tmp_path):
    """One split's name at most among the folder's data: a plain folder, as before."""
    _save(tmp_path / "in", "train/ + test/")
    os.rename(tmp_path / "in" / "test", tmp_path / "in" / "extra")
    (tmp_path / "in" / "more.jsonl").write_text(json.dumps({"input_ids": [5, 6, 7]}) + "\n")
    rc, out = cli([str(tmp_path / "in")], tmp_path)
    assert rc == 0 and out["sequences"] == TRAIN + TEST + 1, out
