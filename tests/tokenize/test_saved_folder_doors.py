"""S46A-4: a `datasets.save_to_disk` folder is one input wherever it is met: given by name,
matched by a glob, inside a folder input (one or two deep), on an object-store prefix (what
`ds.save_to_disk("s3://...")` writes) given or inside a prefix input: its data files in the
order its state.json lists them (here not their name order), never file by file (its
dataset_info.json was read as a .json of rows and refused, sending the user to rewrite a file
`datasets` owns). A DatasetDict folder is refused by every door naming its splits."""
from __future__ import annotations

import json
import os
import shutil

import pytest
from conftest import upload_tree

datasets = pytest.importorskip("datasets")

from packtool.errors import PacktoolInputError  # noqa: E402
from packtool.storage import locate  # noqa: E402
from packtool.tokenize.readers import resolve_inputs  # noqa: E402


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> str:
    """A save_to_disk folder of 3 data files whose state.json lists them in reverse name order."""
    d = str(tmp_path_factory.mktemp("sd") / "saved")
    datasets.Dataset.from_dict({"text": [f"row {i}" for i in range(9)]}).save_to_disk(d, num_shards=3)
    state = json.load(open(os.path.join(d, "state.json")))
    state["_data_files"].reverse()
    json.dump(state, open(os.path.join(d, "state.json"), "w"))
    return d


def _state_order(d: str) -> list[str]:
    return [f["filename"] for f in json.load(open(os.path.join(d, "state.json")))["_data_files"]]


def _local(saved, tmp_path, door: str) -> tuple[list[str], list[str]]:
    """(the inputs for `door`, the files expected in order)."""
    par = tmp_path / "par"
    par.mkdir()
    (par / "a.jsonl").write_text('{"text": "plain row"}\n')
    (par / "z.jsonl").write_text('{"text": "last row"}\n')
    where = {"by name": tmp_path / "alone", "by a glob": par / "sdfolder", "inside a folder input": par / "sdfolder",
             "two deep inside a folder input": par / "deeper" / "sdfolder"}[door]
    shutil.copytree(saved, where)
    spec = {"by name": str(where), "by a glob": str(par / "*")}.get(door, str(par))
    data = [str(where / n) for n in _state_order(saved)]
    plain = [] if door == "by name" else [str(par / "a.jsonl")]
    return [spec], plain + data + ([] if door == "by name" else [str(par / "z.jsonl")])


LOCAL = ["by name", "by a glob", "inside a folder input", "two deep inside a folder input"]


@pytest.mark.parametrize("door", LOCAL)
def test_a_saved_folder_is_read_as_itself_by_every_local_door(saved, tmp_path, door):
    spec, want = _local(saved, tmp_path, door)
    got = resolve_inputs(spec, quiet=True)
    assert [f.path for f in got] == want
    assert all(f.kind == "arrow" for f in got if f.path.endswith(".arrow"))


@pytest.mark.parametrize("door", ["the prefix given", "inside a prefix input", "matched by a glob"])
def test_a_saved_folder_on_a_store_is_read_as_itself(saved, s3, door, tmp_path):
    upload_tree(saved, f"{s3}/in/sd")
    locate(s3).join("in", "a.jsonl").write_bytes(b'{"text": "plain row"}\n')
    spec = {"the prefix given": f"{s3}/in/sd/", "inside a prefix input": f"{s3}/in/",
            "matched by a glob": f"{s3}/in/*"}[door]
    got = [f.path for f in resolve_inputs([spec], quiet=True)]
    data = [f"{s3}/in/sd/{n}" for n in _state_order(saved)]
    assert got == (data if door == "the prefix given" else [f"{s3}/in/a.jsonl", *data]), got
    if door == "inside a prefix input":  # and packed: every row of both, the Arrow streams read off the store
        import subprocess
        import sys
        from conftest import GPT2
        r = subprocess.run([sys.executable, "-m", "packtool", "pack", spec, "--tokenizer", GPT2, "-C", "64",
                            "--dry-run", "-q", "--json", "--cache-dir", str(tmp_path / "c")], capture_output=True,
                           text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
        assert r.returncode == 0 and json.loads(r.stdout)["sequences"] == 10, r.stderr[-2000:]


@pytest.fixture(scope="module")
def saved_dict(tmp_path_factory) -> str:
    d = str(tmp_path_factory.mktemp("sdd") / "dict")
    ds = datasets.Dataset.from_dict({"text": ["a", "b"]})
    datasets.DatasetDict({"train": ds, "test": ds}).save_to_disk(d)
    return d


@pytest.mark.parametrize("door", ["inside a folder input", "on a store prefix"])
def test_a_dataset_dict_is_refused_naming_its_splits(saved_dict, tmp_path, door, request):
    if door == "on a store prefix":
        s3 = request.getfixturevalue("s3")
        upload_tree(saved_dict, f"{s3}/in/dd")
        spec = f"{s3}/in/"
    else:
        shutil.copytree(saved_dict, tmp_path / "par" / "dd")
        (tmp_path / "par" / "a.jsonl").write_text('{"text": "plain row"}\n')
        spec = str(tmp_path / "par")
    with pytest.raises(PacktoolInputError) as e:
        resolve_inputs([spec], quiet=True)
    message = str(e.value)
    assert "DatasetDict" in message and "test, train" in message and "dd" in message and "\n" not in message, message


# R-1 (s47 review): a local glob whose matches are the files inside the folder (its
# dataset_info.json and state.json among them) read them as row files; the store door grouped them
@pytest.mark.parametrize("pattern", ["*/*", "**/*.json*"])
def test_a_glob_matching_a_saved_folders_files_reads_the_folder_as_itself(saved, tmp_path, pattern):
    par = tmp_path / "par"
    par.mkdir()
    (par / "a.jsonl").write_text('{"text": "plain row"}\n')
    shutil.copytree(saved, par / "sdfolder")
    got = [f.path for f in resolve_inputs([str(par / pattern)], quiet=True)]
    data = [str(par / "sdfolder" / n) for n in _state_order(saved)]
    assert got == {"*/*": data, "**/*.json*": [str(par / "a.jsonl"), *data]}[pattern], got


# R-7 (s47 review): a folder input spelled another way than the paths its listing gives (`d//`)
# found no save_to_disk folder below it: its files were read one by one
@pytest.mark.parametrize("spelled", ["{par}//", "{par}/./", "{par}/../par"])
def test_a_saved_folder_inside_a_folder_input_however_the_folder_is_spelled(saved, tmp_path, spelled):
    par = tmp_path / "par"
    par.mkdir()
    (par / "a.jsonl").write_text('{"text": "plain row"}\n')
    shutil.copytree(saved, par / "sdfolder")
    got = [f.path for f in resolve_inputs([spelled.format(par=par)], quiet=True)]
    assert got == [str(par / "a.jsonl"), *(str(par / "sdfolder" / n) for n in _state_order(saved))], got


# R-10 (s47 review): a save_to_disk prefix's own URI was cut from its first object's URI by the
# raw key's length; a name there that the URI percent-encodes (a space, '#') cut it mid-name
def test_a_saved_prefix_is_named_whole_beside_an_object_whose_name_is_encoded(saved_dict, s3):
    upload_tree(saved_dict, f"{s3}/in/dd")
    locate(s3).join("in", "dd", "a b#.jsonl").write_bytes(b'{"text": "plain row"}\n')
    with pytest.raises(PacktoolInputError) as e:
        resolve_inputs([f"{s3}/in/"], quiet=True)
    assert f"{s3}/in/dd:" in str(e.value) and "DatasetDict" in str(e.value), str(e.value)


@pytest.fixture(scope="module")
def resaved(tmp_path_factory) -> str:
    """A save_to_disk folder saved into twice (10 rows in 2 shards, then 4 rows in 1): `datasets`
    leaves the first save's shards beside the new one; state.json lists the new one alone."""
    d = str(tmp_path_factory.mktemp("rsd") / "par" / "std2")
    datasets.Dataset.from_dict({"text": [f"old {i}" for i in range(10)]}).save_to_disk(d, num_shards=2)
    datasets.Dataset.from_dict({"text": [f"new {i}" for i in range(4)]}).save_to_disk(d, num_shards=1)
    assert len(os.listdir(d)) == 5 and _state_order(d) == ["data-00000-of-00001.arrow"]
    return d


# S48A-5: a glob matching a save_to_disk folder's .arrow files (the folder's own name, `**`, local
# and on a store) read the earlier save's shards beside the current one, with no word (14 rows where
# the dataset holds 4); every door now reads what state.json lists and names the shards passed over
@pytest.mark.parametrize("where", ["local", "store"])
@pytest.mark.parametrize("pattern", ["std2/*.arrow", "**/*.arrow", "std2/data-*"])
def test_a_glob_passes_over_an_earlier_saves_shards_with_a_note(resaved, where, pattern, request):
    from packtool.notes import mark, since
    par = os.path.dirname(resaved)
    base = par
    if where == "store":
        base = f"{request.getfixturevalue('s3')}/par"
        upload_tree(par, base)
    start = mark()
    got = [f.path for f in resolve_inputs([f"{base}/{pattern}"])]
    assert got == [f"{base}/std2/data-00000-of-00001.arrow"], got
    said = [n for n in since(start) if "state.json does not list" in n]
    assert len(said) == 1 and "data-00000-of-00002.arrow, data-00001-of-00002.arrow" in said[0], since(start)
    assert f"{base}/std2" in said[0], said


@pytest.mark.parametrize("where", ["local", "store"])
def test_an_earlier_saves_shard_named_by_its_path_is_read_as_asked(resaved, where, request):
    from packtool.notes import mark, since
    base = os.path.dirname(resaved)
    if where == "store":
        base = f"{request.getfixturevalue('s3')}/par"
        upload_tree(os.path.dirname(resaved), base)
    start = mark()
    got = [f.path for f in resolve_inputs([f"{base}/std2/data-00001-of-00002.arrow"])]
    assert got == [f"{base}/std2/data-00001-of-00002.arrow"] and not since(start), (got, since(start))


# S48A-17: a state.json decides which files packtool reads: one naming `../other/x.arrow` or an
# absolute path read (and packed) a file outside the folder the user gave, with no word; one naming
# a file twice or a file that is gone was "input given more than once" / pyarrow's Errno 2, state.json
# never named. Each is refused by every door (by name, inside a folder input, on a store prefix)
# naming state.json and the entry.
BAD_STATES = {"outside": (["../other/data-00000-of-00003.arrow"], "../other/data-00000-of-00003.arrow"),
              "absolute": (["{abs}"], "{abs}"), "in a subfolder": (["sub/x.arrow"], "sub/x.arrow"),
              "twice": (["data-00000-of-00003.arrow"] * 2, "more than once"), "gone": (["gone.arrow"], "gone.arrow")}


@pytest.mark.parametrize("door", ["by name", "inside a folder input", "on a store prefix"])
@pytest.mark.parametrize("bad", list(BAD_STATES))
def test_a_state_json_naming_a_file_not_plainly_in_its_folder_is_refused(saved, tmp_path, door, bad, request):
    names, said = BAD_STATES[bad]
    other = tmp_path / "other"
    shutil.copytree(saved, other)
    names = [n.format(abs=str(other / "data-00001-of-00003.arrow")) for n in names]
    said = said.format(abs=str(other / "data-00001-of-00003.arrow"))
    mine = tmp_path / "par" / "sd"
    shutil.copytree(saved, mine)
    state = json.load(open(mine / "state.json"))
    state["_data_files"] = [{"filename": n} for n in names]
    json.dump(state, open(mine / "state.json", "w"))
    spec = {"by name": str(mine), "inside a folder input": str(tmp_path / "par")}.get(door)
    if door == "on a store prefix":
        s3 = request.getfixturevalue("s3")
        upload_tree(str(tmp_path / "par"), f"{s3}/par")
        spec = f"{s3}/par/sd/"
    with pytest.raises(PacktoolInputError) as e:
        resolve_inputs([spec], quiet=True)
    message = str(e.value)
    assert "state.json" in message and said in message and "\n" not in message, message
    assert "given more than once" not in message and "Errno" not in message, message


# S49A-9: `pack std2/*.arrow` typed unquoted reaches packtool as the files the shell matched, each by
# its path: the earlier save's shards were read beside the current one (14 rows for 4, no word) where
# the quoted glob reads 4 and names them. Files of one save_to_disk folder named beside a file its
# state.json lists are judged as that folder's glob matches are, local and on a store, by every order
# (one stale shard alone stays "as asked": the test above).
@pytest.mark.parametrize("where", ["local", "store"])
@pytest.mark.parametrize("named", [["data-00000-of-00001.arrow", "data-00000-of-00002.arrow", "data-00001-of-00002.arrow"],
                                   ["data-00001-of-00002.arrow", "data-00000-of-00001.arrow"]])
def test_an_earlier_saves_shards_named_beside_the_listed_one_are_passed_over(resaved, where, named, request):
    from packtool.notes import mark, since
    base = os.path.dirname(resaved)
    if where == "store":
        base = f"{request.getfixturevalue('s3')}/par"
        upload_tree(os.path.dirname(resaved), base)
    start = mark()
    got = [f.path for f in resolve_inputs([f"{base}/std2/{n}" for n in named])]
    assert [os.path.basename(p) for p in got] == ["data-00000-of-00001.arrow"], got
    said = [n for n in since(start) if "state.json does not list" in n]
    stale = sorted(n for n in named if n.endswith("-of-00002.arrow"))
    assert len(said) == 1 and ", ".join(stale) in said[0] and f"{base}/std2" in said[0], since(start)
