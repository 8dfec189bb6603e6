"""What a tokenized cache entry holds for a corpus of rows that each meet one of the rules that shape
an entry (loss masks, empty turns, weights, tool calls, refusals, side values), recorded beside the
CACHE_VERSION it was made under.

Why: an entry is reused by its key (input bytes, tokenizer, options, CACHE_VERSION), so a rule that
changes what an entry holds, landed without a CACHE_VERSION bump, leaves users training on entries
built under the old rule. tests/tokenize/test_cache_rules_record.py fails when this corpus's entries
change while CACHE_VERSION stays; after bumping it (packtool/tokenize/cache_entry.py, with a line on
why), record again:

    PYTHONPATH=. python tests/cache_rules_corpus.py --record
"""
from __future__ import annotations

import hashlib
import json
import os
import sys

import numpy as np

RECORD = os.path.join(os.path.dirname(__file__), "tokenize", "cache_rules_record.json")
GPT2 = os.path.join(os.path.dirname(__file__), "..", "fixtures", "tokenizers", "gpt2", "tokenizer.json")

_U, _A, _S = ({"role": r, "content": c} for r, c in
              (("user", "What is two plus two?"), ("assistant", "Four."), ("system", "Be brief.")))


def _jsonl(rows) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


# name -> (file name, file text, TokenizeConfig keywords beyond the tokenizer)
CASES = {
    "chat": ("c.jsonl", _jsonl([{"messages": [_S, _U, _A]}, {"messages": [_U, _A, _U, _A]}]),
             {"chat_template": "chatml"}),
    "chat_whitespace_turn": ("c.jsonl", _jsonl([{"messages": [_U, {"role": "assistant", "content": "  \n"}]},
                                                {"messages": [_U, _A]}]),
                             {"chat_template": "chatml", "on_empty": "skip"}),
    "chat_weight_zero": ("c.jsonl", _jsonl([{"messages": [_U, {**_A, "weight": 0}, _U, _A]}]),
                         {"chat_template": "chatml"}),
    "chat_tool_calls": ("c.jsonl", _jsonl([{"messages": [_U, {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "add", "arguments": "{\"a\": 2, \"b\": 2}"}}]},
        {"role": "tool", "content": "4"}, _A]}]), {"chat_template": "chatml"}),
    # a number beyond float64 inside a row's JSON text (RA-4: trained as Infinity before af05692)
    "chat_tools_text_beyond_float64": ("c.jsonl", _jsonl([{"messages": [_U, _A], "tools": '[{"name": "f", "x": 7}]'}])
                                       .replace('\\"x\\": 7', '\\"x\\": 1e400'), {"chat_template": "chatml"}),
    "chat_content_parts": ("c.jsonl", _jsonl([{"messages": [
        {"role": "user", "content": [{"type": "text", "text": "Say hi."}]}, _A]}]), {"chat_template": "chatml"}),
    "chat_generation_marker": ("c.jsonl", _jsonl([{"messages": [_U, {**_A, "content": "a\ue000b"}]}]),
                               {"chat_template": "chatml"}),
    "sharegpt": ("s.json", json.dumps([{"conversations": [{"from": "human", "value": "Hi"},
                                                          {"from": "gpt", "value": "Hello."}]}]),
                 {"chat_template": "chatml"}),
    "text": ("t.jsonl", _jsonl([{"text": "The quick brown fox."}, {"text": "Jumps."}]), {}),
    "text_empty_skipped": ("t.jsonl", _jsonl([{"text": ""}, {"text": "Jumps."}]), {"on_empty": "skip"}),
    "prompt_completion": ("p.jsonl", _jsonl([{"prompt": "2+2=", "completion": "4"}]), {}),
    "alpaca": ("a.json", json.dumps([{"instruction": "Add.", "input": "2 2", "output": "4"}]), {}),
    "csv_blank_lines": ("t.csv", "text\nhello there\n\nsecond row\n", {}),
    "ids_only": ("i.jsonl", _jsonl([{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}]), {}),
    "ids_labels": ("i.jsonl", _jsonl([{"input_ids": [1, 2, 3, 4], "labels": [-100, -100, 3, 4]}]), {}),
    "ids_labels_first_only": ("i.jsonl", _jsonl([{"input_ids": [1, 2, 3], "labels": [1, -100, -100]},
                                                 {"input_ids": [1, 2, 3], "labels": [-100, 2, 3]}]),
                              {"on_empty": "skip"}),
    "ids_loss_mask_row_null": ("i.jsonl", _jsonl([{"input_ids": [1, 2, 3], "loss_mask": None},
                                              {"input_ids": [1, 2], "loss_mask": [0, 1]}]), {}),
    "ids_trl_masks": ("i.jsonl", _jsonl([{"input_ids": [1, 2, 3, 4], "completion_mask": [0, 1, 1, 1],
                                          "assistant_masks": [0, 0, 1, 1]}]), {}),
    "ids_booleans": ("i.jsonl", _jsonl([{"input_ids": [1, True, 3]}]), {}),
    "json_data_after_array": ("i.json", json.dumps([{"input_ids": [1, 2]}]) + "\n{\"input_ids\": [3]}", {}),
    "side_values": ("r.jsonl", _jsonl([{"input_ids": [1, 2, 3], "adv": [0.5, -1.25, 2.0]},
                                       {"input_ids": [4, 5], "adv": [1e-300, 3.0]}]), {"side_columns": ("adv",)}),
    "side_nan": ("r.jsonl", _jsonl([{"input_ids": [1, 2], "adv": [0.5, "NaN"]}]).replace('"NaN"', "NaN"),
                 {"side_columns": ("adv",)}),
    "side_beyond_float64": ("r.json", '[{"input_ids": [1, 2], "adv": [0.5, 1e400]}]', {"side_columns": ("adv",)}),
}


def _digest_entry(cache) -> dict:
    """The entry's content, not its bytes: rows, masks, counts and every flat/ and side array (file
    bytes would move with pyarrow's writer, paths and times with the run)."""
    import pyarrow.parquet as pq
    h = hashlib.sha256()
    rows = cache.read_rows(np.arange(cache.num_rows))
    for a in (rows.input_ids, rows.loss_mask, rows.offsets, cache.source_indices()):
        h.update(np.ascontiguousarray(a).tobytes())
    for p in sorted(cache.parquet_files):
        h.update(json.dumps(pq.read_table(p).to_pylist(), sort_keys=True, default=str).encode())
    flat = os.path.join(cache.root, "flat")
    for name in sorted(os.listdir(flat)) if os.path.isdir(flat) else ():
        with open(os.path.join(flat, name), "rb") as f:
            h.update(name.encode() + f.read())
    meta = {k: cache.meta.get(k) for k in ("num_rows", "num_source_rows", "num_tokens", "num_loss_tokens",
                                            "skipped", "side_nonfinite", "token_lists")}
    for first in (v.get("first") for v in (meta["side_nonfinite"] or {}).values()):
        if first:  # the run's folder is not the entry's content
            first["file"] = os.path.basename(first["file"])
    return {"digest": h.hexdigest()[:32], "counts": meta}


def entry_of(name: str, folder: str) -> dict:
    """Case `name`'s entry (its digest and counts) or the packtool error class that refused it."""
    from packtool.errors import PacktoolError
    from packtool.tokenize import tokenize_to_cache
    from packtool.tokenize.config import TokenizeConfig
    file, text, kw = CASES[name]
    os.makedirs(os.path.join(folder, name), exist_ok=True)
    path = os.path.join(folder, name, file)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    try:
        cache = tokenize_to_cache(path, TokenizeConfig(tokenizer=GPT2, **kw),
                                  cache_dir=os.path.join(folder, name, "cache"), progress=False)
    except PacktoolError as e:
        return {"refused": type(e).__name__}
    return _digest_entry(cache)


def versions() -> dict:
    import tokenizers
    from packtool.tokenize.cache_entry import CACHE_VERSION
    return {"cache_version": CACHE_VERSION, "tokenizers": tokenizers.__version__}


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        cases = {n: entry_of(n, d) for n in CASES}
    with open(RECORD, "w") as f:
        json.dump({**versions(), "cases": cases}, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"recorded {len(cases)} cases under {versions()} in {RECORD}")
