"""`pack REPO --split S` on a local dataset repo folder went through `datasets.load_dataset`
(S47A-14, S47A-15): its Arrow conversion was written into HF_DATASETS_CACHE with none of the
checks every other place packtool makes something write gets (inside a packed output it made
that output fail verify, even under --dry-run), and a data fault in a split file (a bad JSON
line, a column first holding a value past the first block) was "internal error (a packtool bug)
DatasetGenerationError", exit 3, no file, no line. A JSON (Lines) or Parquet repo's split files
are now read by packtool's readers (found by datasets' own rules): the same verdict as the same
files by name. What datasets still reads (another format; a Hub name from the local cache) is
held to the cache-place rule first, and its data errors are the input's, exit 2."""
from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from conftest import GPT2
from packtool.cli.app import app

pytest.importorskip("datasets")

README = ("---\nconfigs:\n- config_name: main\n  data_files:\n  - split: train\n    path: main/train-*\n"
          "  - split: test\n    path: main/test-*\n---\n")
# layout: (train file below the repo, test file, README)
LAYOUTS = {"data/ split files": ("data/train-00000.jsonl", "data/test-00000.jsonl", None),
           "split folders": ("train/part.jsonl", "test/part.jsonl", None),
           "README configs": ("main/train-00000.jsonl", "main/test-00000.jsonl", README)}
ROWS = [json.dumps({"text": f"row {i} " * 5}) for i in range(6)]
LATE = [json.dumps({"input_ids": list(range(10, 40))})] * 9000 + [
    json.dumps({"input_ids": [11, 12, 13, 14], "loss_mask": [0, 0, 1, 1]})]  # past the 64 KiB peek
FAULTS = {"a bad JSON line": ROWS + ['{"text": [oops'], "a column first holding a value late": LATE}


def _repo(tmp_path, layout: str, train_lines: list[str]) -> tuple[str, str]:
    train, test, readme = LAYOUTS[layout]
    root = tmp_path / "repo"
    for rel, lines in ((train, train_lines), (test, ROWS[:2])):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("\n".join(lines) + "\n")
    if readme:
        (root / "README.md").write_text(readme)
    return str(root), str(root / train)


@pytest.fixture(autouse=True)
def _datasets_cache(monkeypatch, tmp_path):
    """HF_DATASETS_CACHE as datasets reads it (once, at its import): its config, set per test."""
    import datasets.config
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf"))

    def place(path):
        monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", path)
        monkeypatch.setenv("HF_DATASETS_CACHE", path)
    return place


def _pack(args, tmp_path, **env):
    r = CliRunner().invoke(app, ["pack", *args, "--tokenizer", GPT2, "-C", "256", "--dry-run", "--json",
                                 "--cache-dir", str(tmp_path / "cache")], env={"HF_HUB_OFFLINE": "1", **env})
    line = r.output.strip().splitlines()[-1]
    return r.exit_code, json.loads(line[line.index("{"):])


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_split_files_fault_gets_the_verdict_the_file_gets_by_name(tmp_path, layout, fault):
    repo, train = _repo(tmp_path, layout, FAULTS[fault])
    config = ["--config", "main"] if LAYOUTS[layout][2] else []
    by_door = _pack([repo, "--split", "train", *config], tmp_path)
    by_name = _pack([train], tmp_path)
    assert by_door[0] == by_name[0] == 2, (by_door, by_name)
    assert by_door[1]["error"] == by_name[1]["error"], (by_door, by_name)
    err = by_door[1]["error"]
    assert err["kind"] == "input" and err["path"] == train and (err["row"] is not None or " line " in err["message"])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_split_is_read_and_datasets_writes_nothing(tmp_path, layout, _datasets_cache):
    repo, train = _repo(tmp_path, layout, ROWS)
    config = ["--config", "main"] if LAYOUTS[layout][2] else []
    hf = tmp_path / "hf"
    _datasets_cache(str(hf))
    rc, out = _pack([repo, "--split", "train", *config], tmp_path)
    assert rc == 0 and out["sequences"] == len(ROWS), out  # the train rows, not the test ones
    assert not hf.exists() or not any(os.scandir(hf)), list(hf.rglob("*"))


def _packed_output(tmp_path) -> str:
    src = tmp_path / "src.jsonl"
    src.write_text("\n".join(ROWS) + "\n")
    out = str(tmp_path / "packed")
    r = CliRunner().invoke(app, ["pack", str(src), "--tokenizer", GPT2, "-C", "256", "-q", "-o", out,
                                 "--cache-dir", str(tmp_path / "cache")])
    assert r.exit_code == 0, r.output
    return out


def _csv_repo(tmp_path) -> str:
    """A repo of CSV files: datasets still reads it (its csv options are not packtool's)."""
    root = tmp_path / "csvrepo" / "data"
    root.mkdir(parents=True)
    (root / "train-0.csv").write_text("text\n" + "\n".join(f"row {i}" for i in range(4)) + "\n")
    (root / "test-0.csv").write_text("text\nheld out\n")
    return str(root.parent)


@pytest.mark.parametrize("place", ["inside a packed output", "a file"])
def test_the_datasets_cache_place_is_held_to_the_rule_before_datasets_writes(tmp_path, place, _datasets_cache):
    out = _packed_output(tmp_path)
    before = sorted(os.listdir(out))
    cache = os.path.join(out, "hf") if place == "inside a packed output" else str(tmp_path / "hfc_file")
    if place == "a file":
        with open(cache, "w") as f:
            f.write("x")
    _datasets_cache(cache)
    rc, got = _pack([_csv_repo(tmp_path), "--split", "train"], tmp_path)
    err = got["error"]
    assert rc == 2 and "HF_DATASETS_CACHE" in err["message"] and "\n" not in err["message"], got
    assert err["kind"] == "config", err  # one kind for the one setting, whatever the reason (RA-2)
    assert sorted(os.listdir(out)) == before  # nothing written into the output
    assert CliRunner().invoke(app, ["verify", out, "-q"]).exit_code == 0


def test_a_data_error_datasets_raises_is_the_inputs(tmp_path):
    root = tmp_path / "csvrepo" / "data"
    root.mkdir(parents=True)
    (root / "train-0.csv").write_text("text,n\na,1\nb,2,3,4\n")  # a row with more fields than the header
    (root / "test-0.csv").write_text("text,n\nc,3\n")
    rc, got = _pack([str(root.parent), "--split", "train"], tmp_path)
    err = got["error"]
    assert rc == 2 and err["kind"] == "input" and err["path"] == str(root.parent), got
    assert "packtool bug" not in err["message"] and "\n" not in err["message"], err


def _files(root) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def _json_repo(tmp_path) -> str:
    repo, _ = _repo(tmp_path, "data/ split files", ROWS)
    return repo


# where packtool (or datasets, for packtool) would write, relative to the repo folder given with --split
PLACES = {"-o inside the split's files": lambda repo, out: ["-o", os.path.join(repo, "data", "train-out")],
          "-o inside the repo": lambda repo, out: ["-o", os.path.join(repo, "packed")],
          "--cache-dir inside the repo": lambda repo, out: ["-o", out, "--cache-dir", os.path.join(repo, "cache")],
          "PACKTOOL_CACHE_DIR inside the repo": lambda repo, out: ["-o", out]}
REPOS = {"JSON repo (packtool's readers)": _json_repo, "CSV repo (datasets)": _csv_repo}


@pytest.mark.parametrize("repo_kind", REPOS)
@pytest.mark.parametrize("place", [*PLACES, "HF_DATASETS_CACHE inside the repo", "HF_DATASETS_CACHE holding it"])
def test_a_place_inside_the_repo_folder_is_refused_before_a_byte(tmp_path, place, repo_kind, _datasets_cache):
    """S48A-2, S48A-6, RA-11: the repo folder given with --split is a folder input for every place
    rule, as `pack REPO` and the library's pack(REPO, split=) were: what packtool (or datasets for
    it) wrote inside was read by the next run's split patterns as rows."""
    repo = REPOS[repo_kind](tmp_path)
    if place.startswith("HF_DATASETS_CACHE") and repo_kind.startswith("JSON"):
        pytest.skip("datasets reads nothing of a JSON repo: its cache is not written")
    before = _files(repo)
    env = {"HF_HUB_OFFLINE": "1", "PACKTOOL_CACHE_DIR": os.path.join(repo, "cache") if "PACKTOOL" in place
           else str(tmp_path / "cache")}
    args = PLACES[place](repo, str(tmp_path / "out")) if place in PLACES else ["-o", str(tmp_path / "out")]
    if place.startswith("HF_DATASETS_CACHE"):
        _datasets_cache(os.path.join(repo, "hf") if "inside" in place else os.path.dirname(repo))
    r = CliRunner().invoke(app, ["--json", "pack", repo, "--split", "train", "--tokenizer", GPT2, "-C", "256",
                                 *args], env=env)
    line = r.output.strip().splitlines()[-1]
    err = json.loads(line[line.index("{"):]).get("error")
    assert r.exit_code == 2 and err, r.output
    assert "inside the input folder" in err["message"] or "holds the input" in err["message"], err
    assert _files(repo) == before and not os.path.exists(tmp_path / "out")


def _cache_entry_inside(tmp_path) -> str:
    """A repo of one rows file (datasets' patterns then take every file for train) and a cache
    entry a run of that file by name wrote inside the repo."""
    repo = tmp_path / "r"
    repo.mkdir()
    (repo / "rows.jsonl").write_text("\n".join(ROWS) + "\n")
    r = CliRunner().invoke(app, ["pack", str(repo / "rows.jsonl"), "--tokenizer", GPT2, "-C", "256", "-q",
                                 "--dry-run", "--cache-dir", str(repo / "cache")])
    assert r.exit_code == 0, r.output
    return str(repo)


def _output_inside(tmp_path) -> str:
    repo = _json_repo(tmp_path)
    os.rename(_packed_output(tmp_path), os.path.join(repo, "data", "train-out"))
    return repo


OWN = {"a tokenized cache entry": _cache_entry_inside, "a packed output": _output_inside}


@pytest.mark.parametrize("own", OWN)
def test_packtools_own_folder_the_split_patterns_take_is_refused(tmp_path, own):
    """RA-11: datasets' split patterns took a cache entry's part (or a packed output's shards) inside
    the repo as the split's files: the stale tokens were packed in place of the user's rows."""
    repo = OWN[own](tmp_path)
    rc, got = _pack([repo, "--split", "train"], tmp_path)
    err = got["error"]
    assert rc == 2 and err["kind"] == "input" and err["flag"] == "--split", got
    assert own in err["message"] and "move them out" in err["message"], err


def _third(path: str, ext: str) -> None:
    if ext == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq
        pq.write_table(pa.table({"text": ["held row"]}), path)
    elif ext == "csv":
        with open(path, "w") as f:
            f.write("text\nheld row\n")
    else:
        with open(path, "w") as f:
            f.write(json.dumps({"text": "held row"}) + "\n")


@pytest.mark.parametrize("ext", ["csv", "parquet", "jsonlines"])
def test_a_split_file_datasets_would_leave_out_is_refused_by_name(tmp_path, ext):
    """S48A-1: datasets reads one file kind per split (the most common), so a train file of another
    kind beside the .jsonl ones was not read, rc 0, no word; naming the split's files read it."""
    repo = _json_repo(tmp_path)
    _third(os.path.join(repo, "data", "train-00001.jsonl"), "jsonl")  # .jsonl the most common kind
    _third(os.path.join(repo, "data", f"train-00002.{ext}"), ext)
    rc, got = _pack([repo, "--split", "train"], tmp_path)
    err = got.get("error")
    assert rc == 2 and err and err["flag"] == "--split" and f"train-00002.{ext}" in err["message"], got
    rc, got = _pack([os.path.join(repo, "data", "train*")], tmp_path)  # the other fix the line names
    assert rc == 0 and got["sequences"] == len(ROWS) + 2, got


# S49A-2: datasets' split patterns (fsspec's glob) pass over a split file that is a link to nothing
# (a Hub snapshot folder whose blob was pruned) or a FIFO: `pack REPO --split train` packed the split
# without it, rc 0, no word, where `pack REPO` refuses it by name. The --split door holds the repo
# folder to the folder door's rule, by every layout.
ODD = {"a link to nothing": lambda p: os.symlink("/nonexistent/blobs/abc", p), "a FIFO": os.mkfifo}


@pytest.mark.parametrize("odd", ODD)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_split_file_that_is_not_a_regular_file_is_refused_by_name(tmp_path, layout, odd):
    repo, train = _repo(tmp_path, layout, ROWS)
    ODD[odd](os.path.join(os.path.dirname(train), "train-00009.jsonl"))
    config = ["--config", "main"] if LAYOUTS[layout][2] else []
    rc, got = _pack([repo, "--split", "train", *config], tmp_path)
    err = got.get("error")
    assert rc == 2 and err and err["kind"] == "input" and "train-00009.jsonl" in err["message"], got


# RA-7: with --config beside --split the CLI loaded the repo itself and handed the library its files,
# so no place rule saw the repo folder: -o and --cache-dir inside it were accepted (a repo of several
# configurations needs --config: the common case). The library now takes config= and reads the
# folder itself, held to the same rules as with --split alone, by the CLI and by pack(config=).
@pytest.mark.parametrize("door", ["CLI", "library"])
@pytest.mark.parametrize("place", PLACES)
def test_a_place_inside_a_repo_read_with_config_is_refused(tmp_path, monkeypatch, place, door):
    repo, _ = _repo(tmp_path, "README configs", ROWS)
    before = _files(repo)
    env = {"HF_HUB_OFFLINE": "1", "PACKTOOL_CACHE_DIR": os.path.join(repo, "cache") if "PACKTOOL" in place
           else str(tmp_path / "cache")}
    args = PLACES[place](repo, str(tmp_path / "out"))
    if door == "CLI":
        r = CliRunner().invoke(app, ["--json", "pack", repo, "--split", "train", "--config", "main", "--tokenizer",
                                     GPT2, "-C", "256", *args], env=env)
        line = r.output.strip().splitlines()[-1]
        err = json.loads(line[line.index("{"):]).get("error")
        assert r.exit_code == 2 and err, r.output
        message = err["message"]
    else:
        from packtool import TokenizeConfig, pack
        from packtool.errors import PacktoolError
        given = dict(zip(args[::2], args[1::2]))
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        with pytest.raises(PacktoolError) as e:
            pack(repo, tokenize=TokenizeConfig(tokenizer=GPT2), split="train", config="main",
                 output=given["-o"], cache_dir=given.get("--cache-dir"))
        message = str(e.value)
    assert "inside the input folder" in message or "holds the input" in message, message
    assert _files(repo) == before and not os.path.exists(tmp_path / "out")


def test_the_library_reads_a_configuration_as_the_cli_does(tmp_path):
    from packtool import TokenizeConfig, pack
    repo, _ = _repo(tmp_path, "README configs", ROWS)
    res = pack(repo, tokenize=TokenizeConfig(tokenizer=GPT2), split="train", config="main", dry_run=True,
               cache_dir=str(tmp_path / "cache"))
    assert res.summary.to_dict()["sequences"] == len(ROWS), res.summary.to_dict()
