"""Issue 23 classes 5/6, S35 edges2: a row refused as an empty example (or one with no loss
token) under the default --on-empty error named the row only ("row 1: empty example; ... pass
--on-empty skip"): a null or empty `messages` did not say that `messages` was the key at
fault, and the fix offered was the flag that drops the row. Every shape's refusal names the
key(s) and the row, saying that rows count from 0, in every input format."""
from __future__ import annotations

import json
from dataclasses import replace

import pyarrow as pa
import pytest
from conftest import GPT2
from rows_support import write_rows
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.errors import PacktoolInputError
from packtool.tokenize.config import TokenizeConfig
from packtool.tokenize.pipeline import tokenize_to_cache

CHAT = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
SHAREGPT = [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]
# case -> (a good row, the bad row, the words that must name its key, extra TokenizeConfig)
CASES = {
    "chat messages null": ({"messages": CHAT}, {"messages": None}, "empty example: messages is null", {}),
    "chat messages []": ({"messages": CHAT}, {"messages": []}, "empty example: messages is null or holds no turns", {}),
    "sharegpt null": ({"conversations": SHAREGPT}, {"conversations": None}, "empty example: conversations is", {}),
    "sharegpt []": ({"conversations": SHAREGPT}, {"conversations": []}, "empty example: conversations is", {}),
    "text empty": ({"text": "a"}, {"text": ""}, "empty example: text is null, empty", {}),
    "text null": ({"text": "a"}, {"text": None}, "empty example: text is null, empty", {}),
    "text blank": ({"text": "a"}, {"text": "  \n"}, "or only whitespace", {}),
    "text field": ({"body": "a"}, {"body": ""}, "empty example: body is", {"text_field": "body"}),
    "prompt/completion empty": ({"prompt": "a", "completion": "b"}, {"prompt": "", "completion": ""},
                                "empty example: prompt and completion are", {}),
    "fields empty": ({"q": "a", "a": "b"}, {"q": "", "a": ""}, "empty example: q and a are",
                     {"shape": "fields", "prompt_field": "q", "response_field": "a"}),
    "tokens empty": ({"input_ids": [1, 2]}, {"input_ids": []}, "empty example: input_ids is null, missing or holds "
                     "no tokens", {}),
    # S44-13: a null or missing token list is the same empty example as [] (it was "input_ids is null", no skip)
    "tokens null": ({"input_ids": [1, 2]}, {"input_ids": None}, "empty example: input_ids is null, missing", {}),
    "tokens missing": ({"input_ids": [1, 2]}, {}, "empty example: input_ids is null, missing", {}),
    "tokens null with loss_mask": ({"input_ids": [1, 2], "loss_mask": [1, 1]}, {"input_ids": None, "loss_mask": None},
                                   "empty example: input_ids is null, missing", {}),
    "tokens null with labels": ({"input_ids": [1, 2], "labels": [1, 2]}, {}, "empty example: input_ids is null", {}),
    # S44-13: a turn of only whitespace is the same empty turn as "" (text "  " is an empty example)
    "chat reply blank": ({"messages": CHAT}, {"messages": [CHAT[0], {"role": "assistant", "content": "   "}]},
                         "empty example: messages[1].content is null, missing or empty (or only whitespace)", {}),
    "chat prompt blank": ({"messages": CHAT}, {"messages": [{"role": "user", "content": "\n \t"}, CHAT[1]]},
                          "empty example: messages[0].content is null, missing or empty", {}),
    "chat reply empty": ({"messages": CHAT}, {"messages": [CHAT[0], {"role": "assistant", "content": ""}]},
                         "empty example: messages[1].content is null, missing or empty", {}),
    "sharegpt reply blank": ({"conversations": SHAREGPT}, {"conversations": [SHAREGPT[0], {"from": "gpt", "value": " "}]},
                             "empty example: conversations[1].value is null, missing or empty", {}),
    # L5: a two-field row's prompt or response of "" or only whitespace is the same empty example as a
    # null one (and as a chat turn's): it was packed without a word, an empty completion counted as all masked
    "completion empty": ({"prompt": "a", "completion": "b"}, {"prompt": "a", "completion": ""},
                         "empty example: completion is null, missing or empty (or only whitespace)", {}),
    "completion blank": ({"prompt": "a", "completion": "b"}, {"prompt": "a", "completion": " \n"},
                         "empty example: completion is null, missing or empty (or only whitespace)", {}),
    "prompt empty": ({"prompt": "a", "completion": "b"}, {"prompt": "", "completion": "b"},
                     "empty example: prompt is null, missing or empty (or only whitespace)", {}),
    "prompt blank": ({"prompt": "a", "completion": "b"}, {"prompt": "\t ", "completion": "b"},
                     "empty example: prompt is null, missing or empty", {}),
    "completion blank templated": ({"prompt": "a", "completion": "b"}, {"prompt": "a", "completion": "  "},
                                   "empty example: completion is null, missing or empty", {"chat_template": "chatml"}),
    "prompt empty templated": ({"prompt": "a", "completion": "b"}, {"prompt": "", "completion": "b"},
                               "empty example: prompt is null, missing or empty", {"chat_template": "chatml"}),
    "question blank": ({"question": "a", "answer": "b"}, {"question": " ", "answer": "b"},
                       "empty example: question is null, missing or empty", {}),
    "answer empty": ({"question": "a", "answer": "b"}, {"question": "a", "answer": ""},
                     "empty example: answer is null, missing or empty", {}),
    "fields answer blank": ({"q": "a", "a": "b"}, {"q": "a", "a": "  "}, "empty example: a is null, missing or empty",
                            {"shape": "fields", "prompt_field": "q", "response_field": "a"}),
    "alpaca instruction blank": ({"instruction": "a", "input": "", "output": "b"},
                                 {"instruction": " ", "input": "x", "output": "b"},
                                 "empty example: instruction is null, missing or empty", {}),
    "alpaca output empty": ({"instruction": "a", "input": "", "output": "b"},
                            {"instruction": "a", "input": "x", "output": ""},
                            "empty example: output is null, missing or empty", {}),
    "alpaca output blank templated": ({"instruction": "a", "input": "", "output": "b"},
                                      {"instruction": "a", "input": "", "output": "\n"},
                                      "empty example: output is null, missing or empty", {"chat_template": "chatml"}),
    # S45A-7: a mask whose only target is the row's first token (never a target in a slab) is all masked
    "loss_mask first token only": ({"input_ids": [1, 2], "loss_mask": [1, 1]},
                                   {"input_ids": [1, 2, 3], "loss_mask": [1, 0, 0]},
                                   "(all masked): loss_mask masks every token after the first (a sequence's first "
                                   "token is never a target)", {}),
    "labels first token only": ({"input_ids": [1, 2], "labels": [1, 2]},
                                {"input_ids": [1, 2, 3], "labels": [1, -100, -100]},
                                "(all masked): labels masks every token after the first", {}),
    "chat user only": ({"messages": CHAT}, {"messages": CHAT[:1]}, "(all masked): messages gives no assistant", {}),
    "loss_mask zeros": ({"input_ids": [1, 2], "loss_mask": [1, 1]}, {"input_ids": [1, 2], "loss_mask": [0, 0]},
                        "(all masked): loss_mask masks every token", {}),
    "labels -100": ({"input_ids": [1, 2], "labels": [1, 2]}, {"input_ids": [1, 2], "labels": [-100, -100]},
                    "(all masked): labels masks every token", {}),
}


def _cfg(case: str, extra: dict) -> TokenizeConfig:
    chat = "messages" in CASES[case][0] or "conversations" in CASES[case][0]
    return TokenizeConfig(tokenizer=GPT2, **{"chat_template": "chatml" if chat else None, **extra})


def _schema(good: dict, bad: dict, fmt: str):
    """A Parquet file's columns when the bad row lacks a key (Arrow infers from the first row)."""
    return pa.Table.from_pylist([good]).schema if fmt == "parquet" and set(good) - set(bad) else None


@pytest.mark.parametrize("fmt", ["jsonl", "json", "parquet"])
@pytest.mark.parametrize("at", [0, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_refusal_names_the_key_and_the_row(tmp_path, case, at, fmt):
    good, bad, said, extra = CASES[case]
    rows = [good, good, good]
    rows[at] = bad
    path = write_rows(tmp_path, rows, fmt, schema=_schema(good, bad, fmt))
    with pytest.raises(PacktoolInputError) as e:
        tokenize_to_cache([path], _cfg(case, extra), path + ".cache", progress=False)
    line = str(e.value)
    assert line.startswith(f"{path}, row {at}: ") and said in line, line
    assert line.endswith("(rows count from 0)") and "on_empty='skip'" in line and "\n" not in line, line


runner = CliRunner()


@pytest.mark.parametrize("case", ["chat messages null", "text empty", "tokens empty"])
def test_the_command_line_names_the_key_and_the_flag(tmp_path, case):
    good, bad, said, _ = CASES[case]
    path = write_rows(tmp_path, [good, bad], "jsonl")
    args = ["pack", path, "--dry-run", "--cache-dir", str(tmp_path / "c"), "--tokenizer", GPT2]
    if "messages" in bad:
        args += ["--chat-template", "chatml"]
    r = runner.invoke(app, ["--json", *args])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    err = json.loads(r.stdout.strip().splitlines()[-1])["error"]
    assert said.replace("on_empty='skip'", "--on-empty skip") in err["message"], err
    assert err["row"] == 1 and err["flag"] == "--on-empty" and "--on-empty skip" in err["message"], err


EMPTY = sorted(c for c in CASES if "empty example" in CASES[c][2])
ALL_MASKED = sorted(c for c in CASES if "(all masked)" in CASES[c][2])


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
@pytest.mark.parametrize("case", EMPTY)
def test_on_empty_skip_drops_and_counts_every_empty_example(tmp_path, case, fmt):
    """S44-13: one rule in every shape: what --on-empty error refuses as an empty example,
    --on-empty skip drops and counts as empty (a null token list was refused under skip)."""
    good, bad, _, extra = CASES[case]
    path = write_rows(tmp_path, [good, bad, good], fmt, schema=_schema(good, bad, fmt))
    cfg = _cfg(case, extra)
    cache = tokenize_to_cache([path], replace(cfg, on_empty="skip"), path + ".cache",
                              progress=False)
    assert cache.skipped["empty"] == 1 and cache.num_rows == 2, cache.skipped


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
@pytest.mark.parametrize("case", ALL_MASKED)
def test_on_empty_skip_drops_and_counts_every_all_masked_example(tmp_path, case, fmt):
    """S45A-7: what --on-empty error refuses as all masked (a mask whose only target is the row's
    first token among them), --on-empty skip drops and counts as all_masked."""
    good, bad, _, extra = CASES[case]
    path = write_rows(tmp_path, [good, bad, good], fmt, schema=_schema(good, bad, fmt))
    cache = tokenize_to_cache([path], replace(_cfg(case, extra), on_empty="skip"), path + ".cache", progress=False)
    assert cache.skipped["all_masked"] == 1 and cache.skipped["empty"] == 0 and cache.num_rows == 2, cache.skipped
