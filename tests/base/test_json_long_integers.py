"""S47B-1: a JSON integer of more than 4,300 digits (Python's int-from-string limit) in a
manifest, a tokenizer_config.json or a JSON array input was Python's bare ValueError: no file
named, verify exit 2 instead of 1 (its manifest problem), the library's verify and SlabDataset
raising a plain ValueError. packtool's one JSON decoder (json_text) says it as a JSON error at
the number, so every door names the file and the line as for any JSON it cannot read."""
from __future__ import annotations

import json
import shutil

import pytest
from conftest import GPT2, gsm8k_packed
from typer.testing import CliRunner

import packtool
from packtool.cli.app import app
from packtool.errors import PacktoolError
from packtool.json_text import loads

runner = CliRunner()
BIG = "1" + "0" * 5000


def test_the_decoder_names_the_number_and_its_line():
    text = '{\n "s": "%s",\n "n": %s\n}' % ("9" * 5000, BIG)  # digits inside a string come first
    with pytest.raises(json.JSONDecodeError) as e:
        loads(text)
    assert e.value.lineno == 3 and "5001 digits" in e.value.msg, e.value
    # a long integer float64 holds is read exactly; past ±1.8e308 it is refused by the float64 rule (RA-4, s50)
    assert loads('{"n": %s}' % ("1" * 300))["n"] == int("1" * 300)


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    t = tmp_path_factory.mktemp("big")
    gsm8k_packed(t, 5, "d", "-o", str(t / "out"), "--cache-dir", str(t / "c"))
    m = t / "out" / ".manifest.json"
    text = m.read_text()
    assert '"seed": 0' in text
    m.write_text(text.replace('"seed": 0', f'"seed": {BIG}', 1))
    return str(t / "out")


def _cli(args, code):
    r = runner.invoke(app, args)
    assert r.exit_code == code, r.output
    return r.output


def _raises(f):
    with pytest.raises(PacktoolError) as e:
        f()
    return str(e.value)


def _verify_lib(o):
    r = packtool.verify(o)
    assert not r.ok
    return " ".join(str(p) for p in r.problems)


DOORS = {  # door -> what it says of the output whose manifest holds the number
    "cli verify (exit 1)": lambda o, t: _cli(["verify", o], 1),
    "cli inspect": lambda o, t: _cli(["inspect", o], 2),
    "library verify": lambda o, t: _verify_lib(o),
    "SlabDataset": lambda o, t: _raises(lambda: __import__("packtool.hf", fromlist=["SlabDataset"]).SlabDataset(o)),
}


@pytest.mark.parametrize("door", DOORS)
def test_a_manifest_number_too_long_is_a_manifest_problem(door, out, tmp_path):
    said = DOORS[door](out, tmp_path)
    assert ".manifest.json" in said and "5001 digits" in said, said


def _tokenizer_config(t):
    d = t / "tok"
    d.mkdir()
    shutil.copy(GPT2, d / "tokenizer.json")
    (d / "tokenizer_config.json").write_text('{"model_max_length": %s}' % BIG)
    (t / "t.jsonl").write_text('{"text": "hello world"}\n')
    return ["pack", str(t / "t.jsonl"), "--tokenizer", str(d)], "tokenizer_config.json"


def _json_array(t):
    (t / "arr.json").write_text('[{"input_ids": [1, 2, 3], "x": %s}]' % BIG)
    return ["pack", str(t / "arr.json")], "arr.json"


@pytest.mark.parametrize("make", [_tokenizer_config, _json_array], ids=["tokenizer_config.json", "json array"])
def test_an_input_number_too_long_names_the_file(make, tmp_path):
    args, name = make(tmp_path)
    said = _cli([*args, "-C", "64", "--dry-run", "-q", "--cache-dir", str(tmp_path / "c")], 2)
    lines = [ln for ln in said.splitlines() if ln.strip()]
    assert len(lines) == 1 and name in lines[0] and "5001 digits" in lines[0] and "line 1" in lines[0], said
