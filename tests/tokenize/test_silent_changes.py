"""Nothing changes silently (issue 13, item 3): every bad input is one error line naming the
file, the row (counted from the file's start) and the fix, with exit code 2, no traceback,
no output and the user's files untouched; every row a documented flag drops, truncates,
skips or splits is counted in the summary, `--json` and the manifest, with a warning line."""
from __future__ import annotations

import gzip
import hashlib
import json
import math
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import GPT2, GSM8K
from typer.testing import CliRunner

import packtool.tokenize.text_readers as text_readers
from packtool.cli.app import app
from packtool.slabs.names import MANIFEST

GSM_ARGS = ["--prompt-field", "question", "--response-field", "answer"]


def _jsonl(path, rows) -> str:
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return str(path)


def _tokens_parquet(path, ids, **extra) -> str:
    pq.write_table(pa.table({"input_ids": ids, **extra}), path)
    return str(path)


def _snapshot(d) -> dict:
    out = {}
    for root, _, files in os.walk(d):
        for n in files:
            p = os.path.join(root, n)
            st = os.stat(p)
            out[p] = (hashlib.sha256(open(p, "rb").read()).hexdigest(), st.st_mtime_ns)
    return out


def _pack(tmp_path, inputs, *flags, monkeypatch=None):
    out = tmp_path / "out"
    args = ["pack", *inputs, "--tokenizer", GPT2, "-o", str(out), "--no-progress",
            "--cache-dir", str(tmp_path / "cache"), *flags]
    return CliRunner().invoke(app, args), out


# ------------------------------------------------------------------- the bad-input corpus
# each case: (id, build(tmp) -> (inputs, extra flags), words the one line must hold)

def _folder_with(ext):
    def build(t):
        d = t / "data"
        d.mkdir()
        _jsonl(d / "a.jsonl", [{"text": "hello there"}])
        (d / f"b{ext}").write_bytes(b"\x28\xb5\x2f\xfd not really")
        (d / "README.md").write_text("notes are not data and are passed over")
        return [str(d)], []
    return build


def _twice(t):
    p = _jsonl(t / "a.jsonl", [{"text": "hello"}])
    return [p, p], []


def _glob_and_name(t):
    p = _jsonl(t / "a.jsonl", [{"text": "hello"}])
    return [str(t / "*.jsonl"), p], []


def _symlink(t):
    p = _jsonl(t / "a.jsonl", [{"text": "hello"}])
    os.symlink(p, t / "b.jsonl")
    return [p, str(t / "b.jsonl")], []


def _ids_jsonl(values, row=2, n=4):
    def build(t):
        rows = [{"input_ids": [1, 2, 3]} for _ in range(n)]
        rows[row] = {"input_ids": values}
        return [_jsonl(t / "ids.jsonl", rows)], []
    return build


def _ids_parquet(bad, row=3, n=5):
    def build(t):
        ids = [[1.0, 2.0, 3.0] for _ in range(n)]
        ids[row] = [4.0, bad, 5.0]
        return [_tokens_parquet(t / "ids.parquet", pa.array(ids, pa.list_(pa.float64())))], []
    return build


def _ids_later_batch(t):
    """A fractional id in row 1500: the second read batch (1024 rows each), counted from the
    file's start."""
    rows = [{"input_ids": [1, 2]} for _ in range(1600)]
    rows[1500] = {"input_ids": [1, 2.5]}
    return [_jsonl(t / "ids.jsonl", rows)], []


def _labels_float(t):
    return [_tokens_parquet(t / "ids.parquet", [[1, 2], [3, 4]],
                            labels=pa.array([[1.0, 2.0], [3.5, 4.0]]))], []


def _labels_shifted(t):  # labels[i] = input_ids[i + 1]: every loss position one token early
    return [_tokens_parquet(t / "ids.parquet", [[1, 2, 3], [4, 5, 6]],
                            labels=pa.array([[-100, 2, 3], [5, 6, -100]]))], []


def _ids_strings(t):
    return [_tokens_parquet(t / "ids.parquet", [["1", "2"], ["3"]])], []


def _ids_scalar(t):
    return [_tokens_parquet(t / "ids.parquet", [1, 2, 3])], []


def _fields(rows, template=True):
    def build(t):
        flags = ["--prompt-field", "q", "--response-field", "a"]
        return [_jsonl(t / "qa.jsonl", rows)], flags + (["--chat-template", "chatml"] if template else [])
    return build


QA = [{"q": "one?", "a": "1"}, {"q": "two?", "a": "2"}, {"q": "three?", "a": "3"}]


def _chat_null_content(t):
    rows = [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}] * 3
    rows = rows + [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None}]}]
    return [_jsonl(t / "chat.jsonl", rows)], ["--chat-template", "chatml"]


def _chat_empty_content(t):  # "" is the same empty turn as null, trained on as "answer nothing"
    rows = [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}] * 2
    rows = rows + [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}]}]
    return [_jsonl(t / "chat.jsonl", rows)], ["--chat-template", "chatml"]


def _sharegpt_null(t):
    rows = [{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]},
            {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": None}]}]
    return [_jsonl(t / "sg.jsonl", rows)], ["--chat-template", "chatml"]


def _alpaca_null(t):
    rows = [{"instruction": "do", "input": "", "output": "done"},
            {"instruction": None, "input": "x", "output": "done"}]
    return [_jsonl(t / "alpaca.jsonl", rows)], ["--chat-template", "chatml"]


def _docs_in_blocks(t, int_rows, n=60):
    """n rows of exactly 60 bytes each: with 600-byte reads every block is 10 whole rows."""
    with open(t / "docs.jsonl", "w") as f:
        for i in range(n):
            text = i if i in int_rows else f"row {i}"
            line = json.dumps({"text": text, "pad": ""})
            line = line[:-2] + "x" * (59 - len(line)) + '"}'
            assert len(line) == 59
            f.write(line + "\n")
    return [str(t / "docs.jsonl")], []


def _type_change_far(t):
    """The text field turns from string to number at line 40, inside a block: the message
    names line 40 of the file, not a row of the block."""
    return _docs_in_blocks(t, {39})


def _type_across_blocks(t):
    """Blocks that parse on their own but disagree: text is a number in the whole block of
    rows 1100..1109 (past the 64 kB that are read to find the columns)."""
    return _docs_in_blocks(t, set(range(1100, 1110)), n=1200)


def _parquet_text_int(t):
    p = t / "docs.parquet"
    pq.write_table(pa.table({"text": pa.array([None, 7, 8], pa.int64())}), p)
    return [str(p)], []


def _gsm(*flags):
    def build(t):
        return [GSM8K], [*GSM_ARGS, *flags]
    return build


CASES = [
    ("folder-xz", _folder_with(".jsonl.xz"), ["b.jsonl.xz", "cannot read", "decompress"]),
    ("folder-lz4", _folder_with(".jsonl.lz4"), ["b.jsonl.lz4", "cannot read"]),
    ("folder-avro", _folder_with(".avro"), ["b.avro", "convert"]),
    ("same-input-twice", _twice, ["a.jsonl", "more than once", "pass each file once"]),
    ("glob-and-name", _glob_and_name, ["a.jsonl", "more than once"]),
    ("symlink-twice", _symlink, ["b.jsonl", "more than once", "a.jsonl"]),
    ("float-id-jsonl", _ids_jsonl([1, 2.5, 3]), ["ids.jsonl", "row 2", "2.5", "integers"]),
    ("nan-id-parquet", _ids_parquet(math.nan), ["ids.parquet", "row 3", "nan"]),
    ("inf-id-parquet", _ids_parquet(math.inf), ["ids.parquet", "row 3", "inf"]),
    ("float-id-later-batch", _ids_later_batch, ["ids.jsonl", "row 1500", "2.5"]),
    ("float-labels", _labels_float, ["ids.parquet", "row 1", "labels", "3.5"]),
    ("shifted-labels", _labels_shifted, ["ids.parquet", "row 1", "labels[0] is 5", "input_ids[0] is 4", "unshifted"]),
    ("string-ids", _ids_strings, ["ids.parquet", "input_ids", "integers"]),
    ("scalar-ids", _ids_scalar, ["ids.parquet", "input_ids", "list"]),
    ("null-prompt-template", _fields(QA[:1] + [{"q": None, "a": "x"}] + QA[1:]),
     ["qa.jsonl", "row 1", "q is null", "--on-empty skip"]),
    ("missing-response-template", _fields(QA + [{"q": "four?"}]), ["qa.jsonl", "row 3", "a is null"]),
    ("null-response-no-template", _fields(QA[:2] + [{"q": "x", "a": None}], template=False),
     ["qa.jsonl", "row 2", "a is null"]),
    ("null-chat-turn", _chat_null_content, ["chat.jsonl", "row 3", "messages[1].content"]),
    ("empty-chat-turn", _chat_empty_content, ["chat.jsonl", "row 2", "messages[1].content", "empty"]),
    ("null-sharegpt-turn", _sharegpt_null, ["sg.jsonl", "row 1", "conversations[1].value"]),
    ("null-alpaca-instruction", _alpaca_null, ["alpaca.jsonl", "row 1", "instruction is null"]),
    ("type-change-far-in-file", _type_change_far, ["docs.jsonl", "line 40", "one type"]),
    ("type-across-blocks", _type_across_blocks, ["docs.jsonl", "row 1100", "column text", "strings"]),
    ("parquet-text-int", _parquet_text_int, ["docs.parquet", "row 1", "column text", "int64"]),
    ("split-to-1-token", _gsm("-C", "1", "--overflow", "split"),
     ["0 loss tokens", "--overflow split", "raise --max-tokens"]),
    ("fixed-length-over-C", _gsm("-C", "512", "--fixed-length", "1024"),
     ["--fixed-length 1024", "--max-tokens 512", "--max-tokens 1024"]),
    ("workers-0", _gsm("--workers", "0"), ["--workers", "positive integer"]),
]


@pytest.mark.parametrize("build,words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path, monkeypatch, build, words):
    monkeypatch.setattr(text_readers, "_JSONL_BLOCK", 600)  # several blocks per small file
    user = tmp_path / "user"
    user.mkdir()
    inputs, flags = build(user)
    before = _snapshot(user)
    res, out = _pack(tmp_path, inputs, *flags)
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert "Traceback" not in res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), res.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert _snapshot(user) == before  # the user's files, byte for byte and mtime
    assert not out.exists()
    left = [n for n in os.listdir(tmp_path) if n not in ("user", "cache")]
    assert left == [], left  # no temp or spill folder beside the output


# ------------------------------------------------------------- counted, documented drops

def _manifest(out) -> dict:
    return json.load(open(os.path.join(out, MANIFEST)))


def test_truncate_is_counted_in_json_manifest_and_a_warning(tmp_path):
    res, out = _pack(tmp_path, [GSM8K], *GSM_ARGS, "-C", "128", "--overflow", "truncate", "--json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    ch = d["changes"]
    assert ch["sequences_truncated"] > 0 and ch["tokens_dropped"] > 0
    assert ch["tokens_dropped"] == d["overflow"]["tokens_dropped"]
    stats = _manifest(out)["stats"]
    assert stats["changes"] == ch
    res, _ = _pack(tmp_path, [GSM8K], *GSM_ARGS, "-C", "128", "--overflow", "truncate", "--overwrite")
    warn = [ln for ln in res.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warn) == 1 and f"{ch['tokens_dropped']:,} token(s) dropped" in warn[0], res.stderr


def test_split_is_counted_with_a_warning(tmp_path):
    res, out = _pack(tmp_path, [GSM8K], *GSM_ARGS, "-C", "128", "--overflow", "split")
    assert res.exit_code == 0, res.output
    ch = _manifest(out)["stats"]["changes"]
    assert ch["sequences_split"] > 0 and ch["chunks"] > ch["sequences_split"]
    assert f"{ch['sequences_split']:,} sequence(s) split into {ch['chunks']:,} chunks" in res.stderr


def test_skipped_rows_are_counted_in_json_manifest_and_a_warning(tmp_path):
    user = tmp_path / "user"
    user.mkdir()
    rows = [{"q": "a?", "a": "b"}, {"q": None, "a": "x"}, {"q": "  ", "a": None}, {"q": "d?", "a": "e"}]
    p = _jsonl(user / "qa.jsonl", rows)
    flags = ["--prompt-field", "q", "--response-field", "a", "--chat-template", "chatml",
             "--on-empty", "skip"]
    res, out = _pack(tmp_path, [p], *flags, "--json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["sequences"] == 2
    assert d["skipped_rows"] == {"empty": 2, "all_masked": 0}  # the two null rows
    assert d["changes"]["rows_skipped_empty"] == 2
    assert _manifest(out)["stats"]["skipped_rows"] == d["skipped_rows"]
    res, _ = _pack(tmp_path, [p], *flags, "--overwrite")
    assert "warning: 2 row(s) skipped by --on-empty skip" in res.stderr


def test_nothing_changed_means_no_warning(tmp_path):
    res, out = _pack(tmp_path, [GSM8K], *GSM_ARGS, "-C", "1024")
    assert res.exit_code == 0, res.output
    assert "warning" not in res.output
    assert not any(_manifest(out)["stats"]["changes"].values())


def test_whole_float_ids_are_taken_as_integers(tmp_path):
    """[1.0, 2.0] loses nothing: packed as 1, 2 (only fractions, NaN and inf are refused)."""
    user = tmp_path / "user"
    user.mkdir()
    p = _tokens_parquet(user / "ids.parquet", pa.array([[1.0, 2.0, 3.0], [4.0, 5.0]]))
    res, out = _pack(tmp_path, [p], "-C", "64")
    assert res.exit_code == 0, res.output
    t = pq.read_table(os.path.join(out, sorted(n for n in os.listdir(out) if n.endswith(".parquet"))[0]))
    ids = sorted(x for row in t.column("input_ids").to_pylist() for x in row if x < 100)
    assert ids == [1, 2, 3, 4, 5]


def test_gzip_folder_input_is_still_read(tmp_path):
    """Supported compressed JSON Lines in a folder are read, not refused with the others."""
    d = tmp_path / "user"
    d.mkdir()
    with gzip.open(d / "a.jsonl.gz", "wt") as f:
        f.write(json.dumps({"text": "hello world"}) + "\n")
    (d / "LICENSE").write_text("not data")
    res, out = _pack(tmp_path, [str(d)], "-C", "64")
    assert res.exit_code == 0, res.output
