"""Issue 23 class 5 (nothing silent in content), readers: an input whose bytes hold rows the
reader does not hand on is refused in one line naming the file and where, never packed short.
S40-1: a .json array with anything after its closing `]` (a second array, JSON Lines rows,
garbage) packed the array only, exit 0, and `verify --source` said OK; S40-7: a pretty-printed
.json holding one object was called "invalid JSON ... rewrite it with a JSON writer".
Each case is read the ways packtool reads an input (its rows, its column peek) and through the
CLI (pack leaves no output; verify --source refuses the same input)."""
from __future__ import annotations

import json
import os

import pytest
from cli_main import run_main
from conftest import GPT2

from packtool.errors import PacktoolInputError
from packtool.tokenize.readers import iter_batches, peek_columns, resolve_inputs

# name -> (file name, bytes, words the one line must hold)
_LOST = {
    "json_two_arrays": ("a.json", b'[{"text":"a"},{"text":"b"}] [{"text":"c"}]',
                        ["line 1, column 29", "extra data after the array"]),
    "json_array_then_jsonl": ("a.json", b'[{"text":"a"},{"text":"b"}]\n{"text":"c"}\n',
                              ["line 2, column 1", "extra data after the array"]),
    "json_array_then_garbage": ("a.json", b'[{"text":"a"},{"text":"b"}] garbage',
                                ["line 1, column 29", "extra data after the array"]),
    "json_array_then_comma": ("a.json", b'[{"text":"a"}],\n', ["line 1, column 15", "extra data"]),
    "json_one_object": ("a.json", json.dumps({"version": 1, "data": [{"text": "a"}]}, indent=2).encode(),
                        ["holds one JSON object", "'version', 'data'", "array of row objects"]),
}


def _write(tmp_path, case):
    name, body, words = _LOST[case]
    p = tmp_path / name
    p.write_bytes(body)
    return str(p), words


def _refused(fn, words):
    with pytest.raises(PacktoolInputError) as e:
        fn()
    msg = str(e.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg, msg
    return msg


@pytest.mark.parametrize("case", sorted(_LOST))
def test_reader_refuses_rows_it_would_not_hand_on(tmp_path, case):
    path, words = _write(tmp_path, case)
    f = resolve_inputs([path])[0]
    _refused(lambda: [b for b in iter_batches(f, 1)], words)
    _refused(lambda: [b for b in iter_batches(f, 4, ["text"])], words)
    if case == "json_one_object":
        _refused(lambda: peek_columns(f), words)


@pytest.mark.parametrize("case", sorted(_LOST))
def test_pack_refuses_leaving_nothing(tmp_path, monkeypatch, capsys, case):
    path, words = _write(tmp_path, case)
    before = open(path, "rb").read()
    out = tmp_path / "o"
    codes = run_main(monkeypatch, ["pack", path, "--tokenizer", GPT2, "-C", "64", "-o", str(out),
                                   "--cache-dir", str(tmp_path / "cache"), "--no-progress"])
    err = capsys.readouterr().err
    assert codes == [2], err
    line = [x for x in err.splitlines() if x.startswith("error:")]
    assert len(line) == 1 and path in line[0] and "Traceback" not in err, err
    for w in words:
        assert w in line[0]
    assert not out.exists()
    assert open(path, "rb").read() == before


def test_verify_source_refuses_rows_lost_after_the_array(tmp_path, monkeypatch, capsys):
    """The S40-1 regression: an output packed from the array alone is not "OK" against the file."""
    good = tmp_path / "good.json"
    good.write_bytes(b'[{"text":"a"},{"text":"b"}]')
    out = tmp_path / "o"
    assert run_main(monkeypatch, ["pack", str(good), "--tokenizer", GPT2, "-C", "64", "-o", str(out),
                                  "--cache-dir", str(tmp_path / "cache"), "--no-progress"]) == [0]
    lost = tmp_path / "lost.json"
    lost.write_bytes(b'[{"text":"a"},{"text":"b"}]\n{"text":"c"}\n')
    capsys.readouterr()
    codes = run_main(monkeypatch, ["verify", str(out), "--source", str(lost), "--tokenizer", GPT2])
    err = capsys.readouterr()
    assert codes and codes[0] != 0, err
    assert "extra data after the array" in err.err + err.out


def test_whitespace_after_the_array_is_fine(tmp_path):
    p = tmp_path / "a.json"
    p.write_bytes(b' \n[{"text":"a"},\n{"text":"b"}]\n\n \t\r\n')
    rows = [r for b in iter_batches(resolve_inputs([str(p)])[0], 1) for r in b.to_pylist()]
    assert rows == [{"text": "a"}, {"text": "b"}]
    assert os.path.getsize(p) > 0
