"""L4: `--bos` on a tokenizer without a BOS token added nothing without a word, where `--eos`
without an EOS was refused (naming neither the tokenizer nor the fix). One rule for both
(tokenize.encode.refuse_absent_specials, asked by request.resolve_cache before any row is read):
a BOS or EOS asked for (the flag given, or the EOS a text or untemplated row ends with by
default) that the tokenizer has none of is refused, exit 2 in one line naming the flag, the
tokenizer and the fix; nothing is written. Every row kind, both engines, the library and the
command line, and `verify --source` (which tokenizes the source the same way). What is not asked
for is not refused: a default BOS ("when the tokenizer has one"), templated rows' default EOS,
`--no-eos`, pre-tokenized rows.
"""
from __future__ import annotations

import json
import os

import pytest
from conftest import GPT2, LOCAL_RAY_GROUP
from typer.testing import CliRunner

from packtool.align import Alignment
from packtool.cli.app import app
from packtool.errors import PacktoolInputError
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig

runner = CliRunner()

ROWS = {"text": ({"text": "Hello world"}, None),
        "prompt_completion": ({"prompt": "Hello", "completion": " world"}, None),
        "chat": ({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]},
                 "chatml")}


def _no_eos(tmp_path) -> str:
    """gpt2 without its one special token: no BOS, no EOS (its <|endoftext|> is plain text)."""
    tok = json.load(open(GPT2))
    tok["added_tokens"] = []
    path = tmp_path / "no_specials.json"
    path.write_text(json.dumps(tok))
    return str(path)


# name -> (tokenizer (gpt2 has an EOS, no BOS), add_bos, add_eos, the flag refused, row kinds refused)
CASES = {"--bos given": (lambda t: GPT2, True, None, "--bos", ("text", "prompt_completion", "chat")),
         "--eos given": (_no_eos, None, True, "--eos", ("text", "prompt_completion", "chat")),
         "default EOS": (_no_eos, False, None, "--eos", ("text", "prompt_completion"))}


def _src(tmp_path, kind) -> str:
    p = tmp_path / f"{kind}.jsonl"
    p.write_text(json.dumps(ROWS[kind][0]) + "\n")
    return str(p)


def _cli_flags(tok, add_bos, add_eos, template) -> list[str]:
    return (["--tokenizer", tok] + ([] if add_bos is None else ["--bos" if add_bos else "--no-bos"])
            + ([] if add_eos is None else ["--eos" if add_eos else "--no-eos"])
            + (["--chat-template", template] if template else []))


def _run(place, tmp_path, src, tok, add_bos, add_eos, template) -> tuple[int, str]:
    out, cache = str(tmp_path / "o"), str(tmp_path / "c")
    if place.startswith("library"):
        fn = pack
        if place == "library ray":
            from packtool.engines import pack_ray as fn
        try:
            fn([src], Alignment(capacity=64), PackingConfig(),
               TokenizeConfig(tokenizer=tok, chat_template=template, add_bos=add_bos, add_eos=add_eos),
               out, cache_dir=cache)
        except PacktoolInputError as e:
            return 2, str(e)
        return 0, ""
    if place == "verify --source":  # an output packed without the flags, its source re-tokenized with them
        ok = runner.invoke(app, ["pack", src, *_cli_flags(tok, False, False, template), "-C", "64",
                                 "-o", out, "--cache-dir", cache, "-q"])
        assert ok.exit_code == 0, ok.output
        cmd = ["verify", out, "--source", src, *_cli_flags(tok, add_bos, add_eos, template),
               "--cache-dir", str(tmp_path / "c2"), "-q"]
    else:
        cmd = ["pack", src, *_cli_flags(tok, add_bos, add_eos, template), "-C", "64", "-o", out,
               "--cache-dir", cache, "-q", "--engine", place.split()[-1]]
    r = runner.invoke(app, cmd)
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert "Traceback" not in r.output and len(errors) <= 1, r.output
    return r.exit_code, errors[0] if errors else ""


PLACES = ["cli local", pytest.param("cli ray", marks=LOCAL_RAY_GROUP), "library",
          pytest.param("library ray", marks=LOCAL_RAY_GROUP), "verify --source"]


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("kind", ROWS)
@pytest.mark.parametrize("case", CASES)
def test_a_special_token_asked_for_that_the_tokenizer_lacks_is_refused(tmp_path, case, kind, place):
    if "ray" in place:
        pytest.importorskip("ray", reason="the ray extra is not installed")
    make_tok, add_bos, add_eos, flag, refused = CASES[case]
    tok = make_tok(tmp_path)
    if place == "verify --source" and case == "default EOS":  # verify follows the record: packed --no-eos
        refused = ()
    code, msg = _run(place, tmp_path, _src(tmp_path, kind), tok, add_bos, add_eos, ROWS[kind][1])
    if kind not in refused:  # templated rows end with no EOS by default: nothing asked, nothing refused
        assert code == 0, msg
        return
    assert code == 2, msg
    lib = place.startswith("library")
    named = {"--bos": "add_bos=True", "--eos": "add_eos=True"}[flag] if lib else flag
    fix = {"--bos": "add_bos=False", "--eos": "add_eos=False"}[flag] if lib else flag.replace("--", "--no-")
    assert tok in msg and named in msg and f"pass {fix}" in msg and "has none" in msg, msg
    assert not os.path.exists(tmp_path / "o" / ".manifest.json") or place == "verify --source"


@pytest.mark.parametrize("kind", ROWS)
@pytest.mark.parametrize("flags", [(None, None), (None, False), (False, False)], ids=["defaults", "--no-eos", "--no-bos --no-eos"])
def test_what_is_not_asked_for_is_not_refused(tmp_path, kind, flags):
    """gpt2 (no BOS) by default, and a tokenizer with neither token once no EOS is asked for."""
    add_bos, add_eos = flags
    tok = GPT2 if flags == (None, None) else _no_eos(tmp_path)
    code, msg = _run("cli local", tmp_path, _src(tmp_path, kind), tok, add_bos, add_eos, ROWS[kind][1])
    assert code == 0, msg


def test_pre_tokenized_rows_are_kept_exactly(tmp_path):
    src = tmp_path / "ids.jsonl"
    src.write_text(json.dumps({"input_ids": [5, 6, 7]}) + "\n")
    code, msg = _run("cli local", tmp_path, str(src), _no_eos(tmp_path), True, True, None)
    assert code == 0, msg
