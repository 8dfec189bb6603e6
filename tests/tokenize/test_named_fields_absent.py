"""`--prompt-field` / `--response-field` naming a column the file lacks (S43-11, class 6: an error
names the flag): on a question/answer file, auto detection packed question -> answer as if the
flags had not been given (`--response-field nope` trained on `answer` without a word). Now the
flag and the file's columns are named, exit 2, through the library, pack and verify --source;
the named pair, and question/answer with no pair named, are packed as before."""
from __future__ import annotations

import json

import pytest
from conftest import GPT2
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.errors import PacktoolInputError
from packtool.tokenize import TokenizeConfig, tokenize_to_cache

ROWS = [{"question": f"q{i}?", "answer": f"a{i}"} for i in range(4)]
ABSENT = {  # (prompt, response) -> the flags the line names
    "response": (("question", "nope"), "--response-field nope: no such column here"),
    "prompt": (("nope", "answer"), "--prompt-field nope: no such column here"),
    "both": (("p", "r"), "--prompt-field p, --response-field r: no such column here"),
}


@pytest.fixture
def qa(tmp_path):
    p = tmp_path / "qa.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return str(p)


def _pack(qa, tmp_path, *flags):
    return CliRunner().invoke(app, ["pack", qa, "--tokenizer", GPT2, *flags, "-C", "64", "-o",
                                    str(tmp_path / "out"), "--no-progress", "--cache-dir", str(tmp_path / "c")])


@pytest.mark.parametrize("case", list(ABSENT))
def test_pack_names_the_flag_whose_column_is_absent(qa, tmp_path, case):
    (prompt, response), words = ABSENT[case]
    r = _pack(qa, tmp_path, "--prompt-field", prompt, "--response-field", response)
    assert r.exit_code == 2, r.output
    (line,) = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert "qa.jsonl: " + words in line and "(columns: question, answer)" in line, line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", list(ABSENT))
def test_the_library_names_its_arguments(qa, tmp_path, case):
    (prompt, response), _ = ABSENT[case]
    cfg = TokenizeConfig(tokenizer=GPT2, prompt_field=prompt, response_field=response)
    with pytest.raises(PacktoolInputError, match=r"(prompt_field|response_field)='[a-z]+'.*: no such column here"):
        tokenize_to_cache([qa], cfg, str(tmp_path / "c"), progress=False)


def test_verify_source_reads_the_flags_as_pack_does(qa, tmp_path):
    assert _pack(qa, tmp_path, "--prompt-field", "question", "--response-field", "answer").exit_code == 0
    r = CliRunner().invoke(app, ["verify", str(tmp_path / "out"), "--source", qa, "--tokenizer", GPT2,
                                 "--prompt-field", "question", "--response-field", "nope"])
    assert r.exit_code == 2 and "--response-field nope: no such column here" in r.output, r.output


@pytest.mark.parametrize("flags", [["--prompt-field", "question", "--response-field", "answer"], []])
def test_the_pair_named_or_detected_is_packed(qa, tmp_path, flags):
    r = _pack(qa, tmp_path, *flags)
    assert r.exit_code == 0, r.output
