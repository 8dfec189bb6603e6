"""Which files of a `datasets.save_to_disk` folder are its rows, and which folder is one, decided
by one rule at every door (local and store: the folder or prefix given, a folder or prefix
holding it, a glob).

RA-3 (s49 review): a folder saved into again with 0 rows (`datasets` writes no data file and
state.json lists none) still holds the earlier save's shards; the folder and prefix doors read
them as the dataset (10 stale rows, rc 0, no word) where the glob door called them stale. A
present state.json decides, listing none included.

RA-2 (s49 review): a glob's .arrow matches beside a file named state.json that is not datasets'
(a training run's, a crawler's) were passed over as "an earlier save_to_disk's shards", or the
glob refused; a folder is a save_to_disk folder on the one proof (dataset_info.json or
dataset_dict.json beside it), a state.json alone is no such proof."""
from __future__ import annotations

import json
import os
import shutil

import pytest
from conftest import upload_tree

datasets = pytest.importorskip("datasets")

from packtool.errors import PacktoolInputError  # noqa: E402
from packtool.tokenize.readers import resolve_inputs  # noqa: E402

STALE = "data-00000-of-00002.arrow, data-00001-of-00002.arrow"


@pytest.fixture(scope="module")
def emptied(tmp_path_factory) -> str:
    """par/std: 10 rows saved in 2 shards, then a Dataset of 0 rows saved into the same folder."""
    par = tmp_path_factory.mktemp("empty_resave") / "par"
    d = str(par / "std")
    datasets.Dataset.from_dict({"input_ids": [[1, 2, 3]] * 10}).save_to_disk(d, num_shards=2)
    features = datasets.Features({"input_ids": datasets.Sequence(datasets.Value("int64"))})
    datasets.Dataset.from_dict({"input_ids": []}, features=features).save_to_disk(d)
    state = json.load(open(os.path.join(d, "state.json")))
    assert state["_data_files"] == [] and STALE.split(", ")[0] in os.listdir(d), (state, os.listdir(d))
    (par / "other.jsonl").write_text('{"input_ids": [7, 8]}\n')
    return str(par)


# every door a save_to_disk folder is read whole by: refused naming it and the shards it holds
WHOLE = {"the folder given": "{base}/std", "the folder given, slash": "{base}/std/", "a folder holding it": "{base}",
         "a glob matching its files": "{base}/std/*", "a glob matching it": "{base}/*"}


@pytest.mark.parametrize("where", ["local", "store"])
@pytest.mark.parametrize("door", list(WHOLE))
def test_a_folder_saved_again_with_no_rows_is_refused_by_every_door(emptied, where, door, request):
    base = emptied
    if where == "store":
        base = f"{request.getfixturevalue('s3')}/par"
        upload_tree(emptied, base)
    with pytest.raises(PacktoolInputError) as e:
        resolve_inputs([WHOLE[door].format(base=base)], quiet=True)
    message = str(e.value)
    assert "holding no rows" in message and "state.json lists no data files" in message, message
    assert STALE in message and f"{base}/std" in message and "\n" not in message, message


@pytest.mark.parametrize("where", ["local", "store"])
def test_a_glob_of_its_shards_says_the_save_holds_no_rows(emptied, where, request):
    from packtool.notes import mark, since
    base = emptied
    if where == "store":
        base = f"{request.getfixturevalue('s3')}/par"
        upload_tree(emptied, base)
    start = mark()
    with pytest.raises(PacktoolInputError) as e:  # its shards are all it matched
        resolve_inputs([f"{base}/**/*.arrow"])
    assert "glob matched no" in str(e.value), str(e.value)
    said = [n for n in since(start) if "state.json does not list" in n]
    assert len(said) == 1 and STALE in said[0] and "holds no rows" in said[0], since(start)
    assert "give the folder itself" not in said[0], said  # the folder is refused: no fix to follow


def _foreign(tmp_path, state) -> str:
    """d/a.arrow, d/b.arrow (input_ids, IPC streams) beside another tool's state.json."""
    import pyarrow as pa
    import pyarrow.ipc as ipc
    d = tmp_path / "d"
    d.mkdir()
    for n in ("a", "b"):
        t = pa.table({"input_ids": [[1, 2, 3], [4, 5, 6, 7]]})
        with ipc.new_stream(str(d / f"{n}.arrow"), t.schema) as w:
            w.write_table(t)
    (d / "state.json").write_text(json.dumps(state))
    return str(tmp_path)


# RA-2 (s50): the files typed one by one (what the shell makes of an unquoted d/*.arrow) took a state.json
# alone as a save's: another tool's refused ("not a datasets state.json ... save the dataset again"), a
# datasets-like one dropped b.arrow with a note. One proof (saved_folder.saved_state) at every door.
PATTERNS = {"d/*.arrow": ["d/*.arrow"], "**/*.arrow": ["**/*.arrow"], "one by one": ["d/a.arrow", "d/b.arrow"]}


@pytest.mark.parametrize("where", ["local", "store"])
@pytest.mark.parametrize("state", [{"step": 3, "epoch": 1}, [1, 2], {"_data_files": []},
                                   {"_data_files": [{"filename": "a.arrow"}], "_fingerprint": "x"}],
                         ids=["an object", "a list", "datasets-like, lists none", "datasets-like, lists a.arrow"])
@pytest.mark.parametrize("pattern", PATTERNS)
def test_a_state_json_with_no_save_to_disk_beside_it_decides_nothing(tmp_path, where, state, pattern, request):
    from packtool.notes import mark, since
    base = _foreign(tmp_path, state)
    if where == "store":
        base = f"{request.getfixturevalue('s3')}/t"
        upload_tree(str(tmp_path), base)
    start = mark()
    got = [f.path for f in resolve_inputs([f"{base}/{p}" for p in PATTERNS[pattern]])]
    assert got == [f"{base}/d/a.arrow", f"{base}/d/b.arrow"], got
    assert not [n for n in since(start) if "state.json" in n], since(start)


def test_a_folder_with_a_state_json_alone_is_no_save_to_disk_folder_for_split(tmp_path):
    from packtool.tokenize.hub_load import _saved_split
    base = _foreign(tmp_path, {"step": 3})
    assert _saved_split(os.path.join(base, "d"), "train", None) is None


@pytest.mark.parametrize("where", ["local", "store"])
def test_a_saved_folders_state_json_without_data_files_is_not_read_as_listing_none(emptied, tmp_path, where,
                                                                                   request):
    d = tmp_path / "par" / "std"
    shutil.copytree(os.path.join(emptied, "std"), d)
    (d / "state.json").write_text(json.dumps({"_fingerprint": "x"}))
    spec = str(d)
    if where == "store":
        spec = f"{request.getfixturevalue('s3')}/par/std/"
        upload_tree(str(tmp_path / "par"), f"{request.getfixturevalue('s3')}/par")
    with pytest.raises(PacktoolInputError) as e:
        resolve_inputs([spec], quiet=True)
    message = str(e.value)
    assert "is not a datasets state.json" in message and "_data_files" in message, message
