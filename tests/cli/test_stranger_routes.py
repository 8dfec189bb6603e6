"""Stranger-test answers (routes): each error names the file and its row (not a global index
across inputs), the wrong-typed parameter, the key a chat turn has, the folder that is not an
output. test_bad_inputs' harness: exit status, one `error:` line, no traceback, user files
untouched, nothing left behind."""
from __future__ import annotations

import json
import shutil

import pytest
from conftest import GPT2
from test_bad_inputs import expect_error


def _pack(tmp_path, *inputs, extra=()):
    return ["pack", *map(str, inputs), "--tokenizer", GPT2, "-o", str(tmp_path / "out"),
            "--no-progress", "--cache-dir", str(tmp_path / "cache"), *extra]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("shard_rows", ["0", "2"])
def test_an_oversized_row_is_named_by_its_file_and_row(tmp_path, shard_rows):
    """R1: the second input's row 1, not "sequence 4" counted across both inputs."""
    a = _jsonl(tmp_path / "small.jsonl", [{"text": "a short document"}] * 3)
    g = _jsonl(tmp_path / "giant.jsonl", [{"text": "short"}, {"text": "word " * 600}])
    line = expect_error(tmp_path, _pack(tmp_path, a, g, extra=["-C", "128", "--plan-shard-rows", shard_rows]),
                        2, "giant.jsonl, row 1:", "tokens; aligned footprint", "--max-tokens",
                        "the first such row")
    assert "sequence 4" not in line


def test_the_row_survives_skipped_rows_before_it(tmp_path):
    g = _jsonl(tmp_path / "giant.jsonl", [{"text": ""}, {"text": "ok"}, {"text": "word " * 600}])
    expect_error(tmp_path, _pack(tmp_path, g, extra=["-C", "128", "--on-empty", "skip"]), 2,
                 "giant.jsonl, row 2:")


@pytest.mark.parametrize("name", ["vocab.json", "words.json"])
def test_a_vocabulary_file_is_not_taken_for_a_tokenizer(tmp_path, name):
    """R13: not `cannot load tokenizer (expected , or } at line 1 column 5)`."""
    tok = tmp_path / "gpt2"
    tok.mkdir()
    shutil.copy(GPT2, tok / "tokenizer.json")
    (tok / name).write_text(json.dumps({"!": 0, '"': 1, "#": 2}))
    data = _jsonl(tmp_path / "d.jsonl", [{"text": "hello"}])
    args = ["pack", str(data), "--tokenizer", str(tok / name), "-o", str(tmp_path / "out"), "--no-progress",
            "--cache-dir", str(tmp_path / "cache")]
    line = expect_error(tmp_path, args, 2, name, "not a tokenizer.json (a vocabulary file?)",
                        f"the tokenizer folder {tok} or {tok / 'tokenizer.json'}")
    assert "line 1 column" not in line


@pytest.mark.parametrize("skip", [False, True])
def test_chat_turns_with_text_instead_of_content_name_their_keys(tmp_path, skip):
    """R3: the turn's keys are named; --on-empty skip would drop every row, so it is no fix."""
    rows = [{"messages": [{"role": "user", "text": "hi"}, {"role": "assistant", "text": "hello"}]}] * 3
    data = _jsonl(tmp_path / "chat.jsonl", rows)
    extra = ["--chat-template", "chatml", *(["--on-empty", "skip"] if skip else [])]
    line = expect_error(tmp_path, _pack(tmp_path, data, extra=extra), 2, "chat.jsonl, row 0",
                        "messages[0]: turn has keys role, text but no content", "rename the key to content")
    assert "--on-empty skip" not in line


def test_one_turn_without_content_among_good_rows_may_still_be_skipped(tmp_path):
    good = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    bad = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "text": "hello"}]}
    data = _jsonl(tmp_path / "chat.jsonl", [good, bad, good])
    expect_error(tmp_path, _pack(tmp_path, data, extra=["--chat-template", "chatml"]), 2,
                 "chat.jsonl, row 1", "messages[1]: turn has keys role, text but no content",
                 "--on-empty skip")
    from test_bad_inputs import runner

    from packtool.cli.app import app
    r = runner.invoke(app, _pack(tmp_path, data, extra=["--chat-template", "chatml", "--on-empty", "skip"]))
    assert r.exit_code == 0, r.stdout + r.stderr


def test_tp1_sp_is_noted_once(tmp_path):
    """R10: one note on stderr; the plan is the sp=off plan."""
    import numpy as np
    from test_bad_inputs import runner

    from packtool.cli.app import app
    np.save(tmp_path / "l.npy", np.full(8, 100))
    r = runner.invoke(app, ["plan", "--lengths", str(tmp_path / "l.npy"), "-C", "512", "--tp", "1", "--sp", "--json"])
    assert r.exit_code == 0, r.stdout + r.stderr
    assert r.stderr.count("--sp has no effect with --tp 1") == 1
    assert json.loads(r.stdout.strip().splitlines()[-1])["alignment"]["sp"] is False


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_read_manifest_itself_says_no_folder_or_a_file(tmp_path, kind):
    """R14: the format's reader says it (not "re-run packtool pack"), so every reader does:
    verify, inspect, the torch dataset."""
    from packtool.errors import PacktoolFormatError
    from packtool.slabs.format import read_manifest
    target = tmp_path / "nope"
    if kind == "file":
        target.write_bytes(b"PAR1")
    want = "a file, not a packtool output folder" if kind == "file" else "no such folder"
    for read in (read_manifest, _slab_dataset):
        with pytest.raises(PacktoolFormatError) as e:
            read(str(target))
        assert want in str(e.value) and "re-run" not in str(e.value)
    # the CLI's verify / inspect: test_stranger_inputs.test_verify_and_inspect_name_a_missing_folder_or_a_file


def _slab_dataset(path):
    pytest.importorskip("torch")
    from packtool.hf import SlabDataset
    return SlabDataset(path)


def test_plan_names_the_lengths_file_and_row(tmp_path):
    """R6: `sequence 0 has 0 tokens` named neither file nor row."""
    (tmp_path / "l.csv").write_text("length\n5\n0\n")
    expect_error(tmp_path, ["plan", "--lengths", str(tmp_path / "l.csv")], 2, "l.csv, row 1: line 3: 0 tokens",
                 "from 1 to 2^62")


def test_output_inside_the_cache_dir_is_refused(tmp_path):
    """R11: like the other inside/ancestor checks of packtool.output, before any work."""
    data = _jsonl(tmp_path / "d.jsonl", [{"text": "hello"}])
    (tmp_path / "cache").mkdir()
    args = ["pack", str(data), "--tokenizer", GPT2, "-o", str(tmp_path / "cache" / "out"), "--no-progress",
            "--cache-dir", str(tmp_path / "cache")]
    expect_error(tmp_path, args, 2, "out", "is inside the tokenized cache folder", "--cache-dir")
    assert not (tmp_path / "cache" / "out").exists() and list((tmp_path / "cache").iterdir()) == []
