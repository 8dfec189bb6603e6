"""S48A-14: a folder or prefix partitioned by split the Spark / pyarrow / DuckDB way
(`df.write.partitionBy("split")`: `root/split=train/`, `root/split=test/`) packed every split,
the test rows too, rc 0, no note; and `--split train` on it read every partition as train
(datasets reads no split from `KEY=VALUE` folder names). The same rows as `train/` + `test/`
folders were refused (S44-14, S48A-9). Now every door refuses it naming the partitions, and the fix
each line gives (the split's partition alone) reads the train rows alone."""
from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from split_support import STORE, cli, store_door_refused

from packtool.align import Alignment
from packtool.errors import PacktoolInputError
from packtool.tokenize.config import TokenizeConfig

TRAIN, TEST = 5, 3
IDS = {"train": [1, 2, 3, 4], "test": [7, 8], "validation": [7, 8]}
# layout: ({file below the root: its split}, the partitions the line names, the train partition)
SPARK = "part-00000-3f1c.c000.snappy.parquet"
LAYOUTS = {
    "Spark parquet, split=train/ + split=test/": (
        {f"split=train/{SPARK}": "train", f"split=test/{SPARK}": "test", "_SUCCESS": None},
        "split=test, split=train", "split=train"),
    "pyarrow write_to_dataset, train + validation": (
        {"split=train/6b2a-0.parquet": "train", "split=validation/6b2a-0.parquet": "validation"},
        "split=train, split=validation", "split=train"),
    "Spark JSON Lines below another key's partition": (
        {f"lang=en/split={s}/part-00000-3f1c.c000.json": s for s in ("train", "test")},
        "lang=*/split=test, lang=*/split=train", "lang=*/split=train"),
}


def _write(root, layout: str) -> None:
    for rel, split in LAYOUTS[layout][0].items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if split is None:
            path.write_bytes(b"")
        elif rel.endswith(".json"):
            path.write_text((json.dumps({"input_ids": IDS[split]}) + "\n") * (TRAIN if split == "train" else TEST))
        else:
            pq.write_table(pa.table({"input_ids": [IDS[split]] * (TRAIN if split == "train" else TEST)}), path)


@pytest.fixture(autouse=True)
def _datasets_cache(monkeypatch, tmp_path):
    """`--split` on a folder is read through datasets, which writes its Arrow conversion here."""
    datasets = pytest.importorskip("datasets")
    import datasets.config  # noqa: F401
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf"))


def _fix(message: str) -> str:
    return message[message.index("pass that split's partition alone (") + 35:].split(")")[0]


def _parts(layout: str, door: str) -> str:
    """The partitions a line names, below the folder or prefix given."""
    return ", ".join(("hv/" if "holding" in door else "") + p for p in LAYOUTS[layout][1].split(", "))


# local door: (the input given, the path the line names), below tmp_path/in (the layout in in/hv)
LOCAL = {"the folder": ("in/hv", "in/hv"), "a folder holding it": ("in", "in"),
         "a glob matching the folder": ("in/h*", "in/hv")}


@pytest.mark.parametrize("door", sorted(LOCAL))
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_partitioned_folder_is_refused_and_its_fix_reads_the_train_rows(tmp_path, layout, door):
    _write(tmp_path / "in" / "hv", layout)
    given, named = (str(tmp_path / p) for p in LOCAL[door])
    rc, out = cli([given], tmp_path)
    err = out.get("error") or {}
    assert rc == 2 and f"a folder partitioned by split ({_parts(layout, door)}, " in err.get("message", ""), out
    assert "\n" not in err["message"] and err["path"] == named, err
    below = os.path.relpath(named, tmp_path / "in" / "hv")
    assert _fix(err["message"]) == os.path.normpath(os.path.join(named, "" if below == "." else "hv",
                                                                 LAYOUTS[layout][2])), err
    rc, out = cli([_fix(err["message"])], tmp_path)
    assert rc == 0 and out["sequences"] == TRAIN, out  # the train rows, not the test ones


@pytest.mark.parametrize("split", ["train", "test"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_split_on_a_partitioned_folder_is_refused_naming_that_partition(tmp_path, layout, split):
    """datasets would read every partition as the split asked for (or know no `test` split)."""
    _write(tmp_path / "hv", layout)
    rc, out = cli([str(tmp_path / "hv"), "--split", split], tmp_path)
    err = out.get("error") or {}
    assert rc == 2 and err.get("flag") == "--split" and LAYOUTS[layout][1] in err["message"], out
    want = split if f"split={split}" in LAYOUTS[layout][1] else "train"
    part = _fix(err["message"])
    assert part == str(tmp_path / "hv" / LAYOUTS[layout][2].replace("train", want)), err
    assert err["message"].endswith("without --split"), err
    rc, out = cli([part], tmp_path)
    assert rc == 0 and out["sequences"] == (TRAIN if want == "train" else TEST), out


@pytest.mark.parametrize("split", [None, "train"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_the_library_refuses_a_partitioned_folder(tmp_path, layout, split):
    from packtool import pack
    _write(tmp_path / "hv", layout)
    with pytest.raises(PacktoolInputError) as e:
        pack([str(tmp_path / "hv")], Alignment(capacity=64), tokenize=TokenizeConfig(), dry_run=True,
             cache_dir=str(tmp_path / "c"), **({"split": split} if split else {}))
    assert LAYOUTS[layout][1] in str(e.value) and "--split" not in str(e.value), str(e.value)
    assert _fix(str(e.value)) == str(tmp_path / "hv" / LAYOUTS[layout][2]), str(e.value)


@pytest.mark.parametrize("door", sorted(STORE))
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_the_same_partitions_on_a_store_are_refused_alike(tmp_path, s3, layout, door):
    fix = store_door_refused(tmp_path, s3, lambda d: _write(d, layout), "hv", door,
                             f"a prefix partitioned by split ({_parts(layout, door)}, ", _fix, TRAIN)
    assert fix == f"{s3}/in/hv/{LAYOUTS[layout][2]}/", fix


# partitions that are no two splits: data the user gathered, read whole as before
PLAIN = {"one split's partition and another value": {"split=train/a.parquet": "train", "split=extra/a.parquet": "test"},
         "another key's partitions": {"lang=en/a.parquet": "train", "lang=fr/a.parquet": "test"},
         "a split word that is not the whole value": {"split=train_v1/a.parquet": "train",
                                                      "split=trainer/a.parquet": "test"}}


@pytest.mark.parametrize("name", sorted(PLAIN))
def test_partitions_of_one_split_at_most_are_read_whole(tmp_path, name):
    for rel, split in PLAIN[name].items():
        (tmp_path / "hv" / rel).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"input_ids": [IDS[split]] * (TRAIN if split == "train" else TEST)}),
                       tmp_path / "hv" / rel)
    rc, out = cli([str(tmp_path / "hv")], tmp_path)
    assert rc == 0 and out["sequences"] == TRAIN + TEST, out
