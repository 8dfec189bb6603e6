"""Small doors users walk through (issue 23, class 7): progress on stderr, `verify --source`
with several files after it, the library's `split` on a dataset folder, an early failure
under `--overflow error`, `--help` and the Done line at 80 columns, and training an output
packed from token ids without a tokenizer (`train --vocab-size`)."""
from __future__ import annotations

import json
import os

import pytest
from conftest import LOCAL_RAY_GROUP
from typer.testing import CliRunner

from packtool.cli.app import app

runner = CliRunner()


def _ids(path, rows=20, long_at=None, tail=""):
    with open(path, "w") as f:
        for i in range(rows):
            n = 300 if i == long_at else 5 + i % 4
            f.write(json.dumps({"input_ids": list(range(1, n + 1))}) + "\n")
        f.write(tail)
    return path


@pytest.fixture
def proj(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _ids(tmp_path / "a.jsonl")
    _ids(tmp_path / "b.jsonl", rows=7)
    return tmp_path


def pack(*args):
    r = runner.invoke(app, ["pack", *args, "--cache-dir", "cache", "-C", "64"])
    assert r.exit_code == 0, r.stdout + r.stderr
    return r


def test_progress_goes_to_stderr(proj):
    r = pack("a.jsonl", "-o", "out", "--progress")
    assert "Tokenizing" not in r.stdout and "Writing" not in r.stdout
    assert "Done:" in r.stdout


@pytest.mark.parametrize("order", ["dir first", "dir last"])
def test_verify_takes_several_files_after_source(proj, order):
    pack("a.jsonl", "b.jsonl", "-o", "out", "--no-progress")
    args = (["verify", "out", "--source", "a.jsonl", "b.jsonl"] if order == "dir first"
            else ["verify", "--source", "a.jsonl", "b.jsonl", "out"])
    r = runner.invoke(app, [*args, "--cache-dir", "cache", "--quiet"])
    assert r.exit_code == 0, r.stdout + r.stderr


def test_verify_extra_arguments_without_source_are_one_line(proj):
    pack("a.jsonl", "-o", "out", "--no-progress")
    r = runner.invoke(app, ["verify", "out", "stray"], prog_name="packtool")
    assert r.exit_code == 2 and "Traceback" not in r.stdout + r.stderr
    assert [ln for ln in r.stderr.splitlines() if ln.startswith("error:")] == [
        "error: unexpected extra argument(s) stray: packtool verify takes one DIRECTORY; the values of --source go"
        " right after it: `packtool verify DIRECTORY --source a b` or `packtool verify --source a --source b"
        " DIRECTORY` (see `packtool verify --help`)"]


def test_library_split_on_a_dataset_folder(proj):
    datasets = pytest.importorskip("datasets")
    from packtool import Alignment, TokenizeConfig
    from packtool import pack as lib_pack
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"input_ids": [[1, 2, 3]] * 6}),
                               "test": datasets.Dataset.from_dict({"input_ids": [[4, 5]] * 2})})
    dd.save_to_disk(str(proj / "dd"))
    for split, rows in (("train", 6), ("test", 2)):
        res = lib_pack([str(proj / "dd")], Alignment(capacity=64), tokenize=TokenizeConfig(),
                       output=str(proj / f"o-{split}"), split=split, cache_dir=str(proj / "cache"))
        assert res.summary.sequences == rows


@pytest.fixture
def engine(request):
    if request.param == "ray":
        request.getfixturevalue("local_ray")  # tests/conftest.py: one Ray with tests/engines/
    return request.param


@pytest.mark.parametrize("engine", ["local", pytest.param("ray", marks=LOCAL_RAY_GROUP)], indirect=True)
def test_overflow_error_stops_at_the_first_long_row(proj, engine):
    # long.jsonl: row 3 is too long; rows later, past several tokenize batches (Ray hands a
    # task the whole file as one block), one holds an id out of range: a run that tokenized
    # the file, or the block, before checking lengths would report that instead
    _ids(proj / "long.jsonl", rows=3000, long_at=3, tail='{"input_ids": [1, -5]}\n')
    inputs = ["long.jsonl"]
    if engine == "local":
        # and a second input ending in a line that is not JSON, past the first block that shape
        # detection reads. (Ray counts a JSON file's rows first, a parse-only pass, so there a
        # broken line anywhere is said before any tokenizing.)
        with open(proj / "later.jsonl", "w") as f:
            f.write('{"input_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]}\n' * 200_000 + "{not json\n")
        inputs.append("later.jsonl")
    r = runner.invoke(app, ["pack", *inputs, "-o", "out", "--cache-dir", "cache", "-C", "64", "--engine", engine])
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.exit_code == 2 and len(lines) == 1, r.stdout + r.stderr
    assert "long.jsonl, row 3: 300 tokens; aligned footprint 300 exceeds capacity 64 (the first such row" in lines[0]
    assert "--overflow" in lines[0] and not os.path.exists(proj / "out")


@pytest.mark.parametrize("command", ["pack", "plan", "inspect", "verify", "train"])
def test_help_at_80_columns_cuts_no_choice_list(command):
    r = runner.invoke(app, [command, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert r.exit_code == 0 and "…" not in r.stdout, r.stdout


def test_the_done_line_keeps_each_command_whole(proj):
    deep = "a-rather-long-output-folder-name-that-takes-most-of-a-line/" * 2 + "out"
    os.makedirs(os.path.dirname(deep))
    r = runner.invoke(app, ["pack", "a.jsonl", "-o", deep, "--cache-dir", "cache", "-C", "64", "--no-progress"],
                      env={"COLUMNS": "80"}, terminal_width=80)
    assert r.exit_code == 0, r.stdout + r.stderr
    assert any(f"`packtool verify {deep}`" in ln for ln in r.stdout.splitlines()), r.stdout


def test_train_vocab_size_for_an_output_without_tokenizer(proj):
    from packtool.megatron.train_cli import _vocab
    from packtool.slabs.format import SlabManifest
    pack("a.jsonl", "-o", "out", "--no-progress")
    man = SlabManifest.read("out")
    with pytest.raises(ValueError, match="--vocab-size"):
        _vocab(man, None)
    # the ids are held to it as the dataset reads them (tests/megatron/test_token_bound.py): no read here
    assert _vocab(man, 8) == 8 and _vocab(man, 9) == 9


@pytest.mark.parametrize("reachable", [False, True])
def test_a_hub_name_without_network_asks_the_local_cache_only(monkeypatch, tmp_path, reachable):
    """No network: offline mode at once (the local cache answers), not ~25 s of retries."""
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf"))  # a place the rule takes
    import packtool.tokenize.hub_load as hf
    seen = []

    def fake_load(spec, config=None, split=None):
        seen.append((os.environ.get("HF_HUB_OFFLINE"), datasets.config.HF_HUB_OFFLINE))
        raise ConnectionError("offline")
    monkeypatch.setattr(hf, "_hub_reachable", lambda timeout=2.0: reachable)
    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    before = datasets.config.HF_HUB_OFFLINE
    with pytest.raises(hf.PacktoolInputError, match="not in the local cache"):
        hf.load_dataset("nobody/nothing-here", None, None)
    assert seen == ([("1", True)] if not reachable else [(None, before)])
    assert "HF_HUB_OFFLINE" not in os.environ and datasets.config.HF_HUB_OFFLINE == before


@pytest.mark.parametrize("flag", ["-q", "--no-progress"])
def test_every_command_with_a_bar_takes_both_spellings_of_no_progress(proj, flag):
    """A script that passes one spelling to every command must not hit a usage error on one."""
    pack("a.jsonl", "-o", "out", flag)
    for args in (["verify", "out"], ["inspect", "out"], ["verify", "out", "--source", "a.jsonl"]):
        r = runner.invoke(app, [*args, flag, "--cache-dir", "cache"] if "--source" in args else [*args, flag])
        assert r.exit_code == 0, (args, r.stdout + r.stderr)


@pytest.mark.parametrize("given", ["out", "out/slabs-00000.parquet"])
def test_a_packed_output_given_as_input_is_refused(proj, given):
    """Re-packing slabs would make each slab one sequence (its rows merged, its pads trained on)."""
    pack("a.jsonl", "-o", "out", "-q")
    r = runner.invoke(app, ["pack", given, "-o", "again", "--cache-dir", "cache", "-q"])
    assert r.exit_code == 2, r.stdout + r.stderr
    line = r.stderr.strip()
    assert "slabs-00000.parquet" in line and "packtool slab shard" in line and "\n" not in line, line
    assert not os.path.exists(proj / "again")


@pytest.mark.parametrize("given,sep", [(None, "\n"), ("", ""), ("\\n\\n", "\n\n"), (" => ", " => ")])
def test_prompt_separator_reaches_two_field_rows(tmp_path, given, sep):
    """TokenizeConfig.prompt_separator from the command line (it had no flag: always a newline)."""
    import pyarrow.parquet as pq
    from conftest import GPT2
    from tokenizers import Tokenizer
    (tmp_path / "qa.jsonl").write_text(json.dumps({"q": "Two plus two?", "a": "Four."}) + "\n")
    flag = [] if given is None else ["--prompt-separator", given]
    r = runner.invoke(app, ["pack", str(tmp_path / "qa.jsonl"), "--tokenizer", GPT2, "--prompt-field", "q",
                            "--response-field", "a", "-o", str(tmp_path / "out"), "--cache-dir",
                            str(tmp_path / "cache"), "-q", "--no-eos", *flag])
    assert r.exit_code == 0, r.stdout + r.stderr
    t = pq.read_table(str(tmp_path / "out" / "slabs-00000.parquet"))
    ids = t.column("input_ids")[0].as_py()[:t.column("seq_lens")[0].as_py()[0]]
    assert Tokenizer.from_file(GPT2).decode(ids) == f"Two plus two?{sep}Four."
