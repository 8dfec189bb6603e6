"""A CSV/TSV written without a header row (stop 37's Left 6): its first line is read as the
column names, so its first row is lost and the shape error named columns such as "4, What is
2+2?" and sent the user to --shape. A first line with a number or nothing where a name goes is
said as what it is, in one line naming the file and the fix (add a header line); a first line
of words that fits no shape says where the names came from. A lengths file's column of Arrow's
making ("f0") is never named: a headerless lengths CSV given --column, a first line mixing numbers
and names, a bad value in a headerless file, each one line."""
from __future__ import annotations

import gzip
import json

import pytest
from cli_main import run_main
from conftest import GPT2

from packtool.errors import PacktoolError
from packtool.planning.lengths import load_lengths
from packtool.tokenize.config import TokenizeConfig
from packtool.tokenize.pipeline import tokenize_to_cache

DATA = {  # name -> (file text, shape, the example header named)
    "numbers": ("What is 2+2?,4\nCapital of France?,Paris\n", "auto", "text, or prompt,completion"),
    "token ids": ("1,2,3\n4,5,6\n", "tokens", "input_ids"),
    "an empty name": (",\nx,y\n", "auto", "text, or prompt,completion"),
    "a float": ("hello,0.5\nbye,0.25\n", "text", "text"),
}


def _file(tmp_path, text: str, name: str) -> str:
    path = tmp_path / name
    data = text.replace(",", "\t").encode() if ".tsv" in name else text.encode()
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    return str(path)


@pytest.mark.parametrize("name", ["d.csv", "d.tsv", "d.csv.gz"])
@pytest.mark.parametrize("case", DATA)
def test_a_first_line_of_data_is_said_with_the_fix(tmp_path, case, name):
    text, shape, example = DATA[case]
    path = _file(tmp_path, text, name)
    with pytest.raises(PacktoolError) as e:
        tokenize_to_cache([path], TokenizeConfig(tokenizer=GPT2, shape=shape), cache_dir=str(tmp_path / "c"),
                          progress=False)
    msg = str(e.value)
    assert msg.startswith(f"{path}: its first line (") and "reads as data, not column names" in msg, msg
    assert f"add a header line naming the columns (e.g. {example})" in msg and "\n" not in msg, msg


def test_a_first_line_of_words_says_where_the_names_come_from(tmp_path):
    path = _file(tmp_path, "Once upon a time there was a cat.\nThe dog barked.\n", "d.csv")
    with pytest.raises(PacktoolError) as e:
        tokenize_to_cache([path], TokenizeConfig(tokenizer=GPT2), cache_dir=str(tmp_path / "c"), progress=False)
    assert "(a CSV/TSV's first line names its columns: if that line is data, add a header line" in str(e.value)


def test_a_header_with_a_number_among_names_that_fit_a_shape_is_read(tmp_path):
    path = _file(tmp_path, "text,2024\nhello,1\n", "d.csv")
    assert tokenize_to_cache([path], TokenizeConfig(tokenizer=GPT2), cache_dir=str(tmp_path / "c"),
                             progress=False).meta["inputs"][0]["rows"] == 1


def test_the_command_line_says_it_in_one_line(tmp_path, monkeypatch, capsys):
    path = _file(tmp_path, "What is 2+2?,4\n", "d.csv")
    monkeypatch.chdir(tmp_path)
    assert run_main(monkeypatch, ["--json", "pack", path, "--tokenizer", GPT2, "-o", "out", "--cache-dir", "c",
                                  "--no-progress"]) == [2]
    err = json.loads(capsys.readouterr().out)["error"]
    assert "reads as data, not column names" in err["message"] and "Traceback" not in err["message"]
    assert not (tmp_path / "out").exists()


LENGTHS = {  # name -> (file text, --column, what the one line says; None: read)
    "headerless": ("12\n40\n7\n", None, None),
    "headerless, --column": ("12\n40\n", "length", "has no header row (its first line is a length), so no column "
                                                   "is named 'length'; drop --column"),
    "numbers and names": ("12,a\n40,b\n", None, "its first line (12,a) holds a number where a column name goes"),
    "headerless, a word": ("12\n40\nabc\n", None, "line 3: 'abc' is not an integer"),
    "headerless, a float": ("12\n4.5\n", None, "line 2: '4.5' is not an integer"),
}


@pytest.mark.parametrize("case", LENGTHS)
def test_a_lengths_csv_without_a_header_never_names_arrows_column(tmp_path, case):
    text, column, said = LENGTHS[case]
    path = _file(tmp_path, text, "l.csv")
    if said is None:
        assert load_lengths(path, column).tolist() == [12, 40, 7]
        return
    with pytest.raises(PacktoolError) as e:
        load_lengths(path, column)
    msg = str(e.value)
    assert said.replace("--column", "column") in msg, msg  # the library's spelling of the argument
    assert "f0" not in msg and "\n" not in msg, msg
