"""Every input shape end to end into the tokenized cache, checked against a direct `tokenizers`
encoding of text the test renders itself, and masks from the encoder's own offsets."""
from __future__ import annotations

import gzip
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import ALPACA, GPT2, GSM8K, MISTRAL, PEPS
from tokenizers import Tokenizer

from packtool.errors import PacktoolInputError
from packtool.tokenize import tokenize_to_cache
from packtool.tokenize.config import TokenizeConfig

GPT2_EOS = 50256
MISTRAL_BOS, MISTRAL_EOS = 1, 2


def _rows(cache):
    r = cache.read_rows(np.arange(cache.num_rows))
    return [(r.input_ids[a:b].tolist(), r.loss_mask[a:b].tolist())
            for a, b in zip(r.offsets[:-1], r.offsets[1:])]


def _overlap_mask(enc, start: int, end: int) -> list[int]:
    """Independent of the library: 1 for every token whose char offsets overlap [start, end)."""
    return [int(e > start and s < end) for s, e in enc.offsets]


def test_text_peps_mistral(cache_dir):
    tok = Tokenizer.from_file(MISTRAL)
    with gzip.open(PEPS, "rt") as f:
        texts = [json.loads(line)["text"] for line in f]
    cache = tokenize_to_cache([PEPS], TokenizeConfig(tokenizer=MISTRAL), cache_dir, progress=False)
    assert cache.num_rows == len(texts)
    for (ids, mask), text in zip(_rows(cache), texts):
        want = [MISTRAL_BOS] + tok.encode(text, add_special_tokens=False).ids + [MISTRAL_EOS]
        assert ids == want
        assert mask == [0] + [1] * (len(want) - 1)      # BOS is never a target; text: every token
    assert cache.lengths().tolist() == [len(r[0]) for r in _rows(cache)]
    assert cache.lengths().min() > 4000                  # the long-document fixture is long


def test_fields_gsm8k_gpt2(cache_dir):
    tok = Tokenizer.from_file(GPT2)
    with open(GSM8K) as f:
        rows = [json.loads(line) for line in f]
    cfg = TokenizeConfig(tokenizer=GPT2, prompt_field="question", response_field="answer")
    cache = tokenize_to_cache([GSM8K], cfg, cache_dir, progress=False)
    assert cache.meta["inputs"][0]["shape"] == "fields"
    for (ids, mask), row in zip(_rows(cache), rows):
        prompt = row["question"] + "\n"
        enc = tok.encode(prompt + row["answer"], add_special_tokens=False)
        assert ids == enc.ids + [GPT2_EOS]                 # gpt2 has no BOS
        assert mask == _overlap_mask(enc, len(prompt), len(prompt) + len(row["answer"])) + [1]
    assert cache.tokenizer_info.bos_id is None and cache.tokenizer_info.eos_id == GPT2_EOS


def test_alpaca_untemplated_mistral(cache_dir):
    tok = Tokenizer.from_file(MISTRAL)
    with open(ALPACA) as f:
        rows = json.load(f)
    cache = tokenize_to_cache([ALPACA], TokenizeConfig(tokenizer=MISTRAL), cache_dir, progress=False)
    assert cache.meta["inputs"][0]["shape"] == "alpaca"
    got = _rows(cache)
    for (ids, mask), row in zip(got, rows):
        if row["input"]:
            prompt = ("Below is an instruction that describes a task, paired with an input that provides "
                      "further context. Write a response that appropriately completes the request.\n\n"
                      f"### Instruction:\n{row['instruction']}\n\n### Input:\n{row['input']}\n\n### Response:\n")
        else:
            prompt = ("Below is an instruction that describes a task. Write a response that appropriately "
                      f"completes the request.\n\n### Instruction:\n{row['instruction']}\n\n### Response:\n")
        enc = tok.encode(prompt + row["response"], add_special_tokens=False)
        assert ids == [MISTRAL_BOS] + enc.ids + [MISTRAL_EOS]
        assert mask == [0] + _overlap_mask(enc, len(prompt), len(prompt) + len(row["response"])) + [1]
    assert any(not r["input"] for r in rows) and any(r["input"] for r in rows)


def test_prompt_completion_parquet(tmp_path, cache_dir):
    tok = Tokenizer.from_file(GPT2)
    with open(GSM8K) as f:
        rows = [json.loads(line) for line in f][:60]
    table = pa.table({"prompt": [r["question"] + "\nAnswer: " for r in rows],
                      "completion": [r["answer"] for r in rows], "extra": list(range(60))})
    path = tmp_path / "pc.parquet"
    pq.write_table(table, path, row_group_size=16)
    cache = tokenize_to_cache([str(path)], TokenizeConfig(tokenizer=GPT2, batch_size=10), cache_dir, progress=False)
    assert cache.meta["inputs"][0]["shape"] == "prompt_completion"
    for (ids, mask), p, c in zip(_rows(cache), table["prompt"].to_pylist(), table["completion"].to_pylist()):
        enc = tok.encode(p + c, add_special_tokens=False)   # no separator: the data carries it
        assert ids == enc.ids + [GPT2_EOS]
        assert mask == _overlap_mask(enc, len(p), len(p) + len(c)) + [1]


def test_tokens_with_labels_mask_or_nothing(tmp_path, cache_dir):
    rng = np.random.default_rng(0)
    lens = np.maximum(rng.integers(1, 300, 500), 2)
    ids = [rng.integers(0, 32000, n).tolist() for n in lens]
    labels = [[-100 if rng.random() < 0.4 else t for t in row] for row in ids]
    for row, x in zip(labels, ids):
        row[-1] = x[-1]          # a target past the first token per row (labels are the ids; S45A-7)
    masks = [[int(x != -100) for x in row] for row in labels]
    pq.write_table(pa.table({"input_ids": ids, "labels": labels}), tmp_path / "l.parquet", row_group_size=100)
    pq.write_table(pa.table({"input_ids": ids, "loss_mask": masks}), tmp_path / "m.parquet")
    pq.write_table(pa.table({"input_ids": ids}), tmp_path / "n.parquet")
    for name, want_masks in (("l", masks), ("m", masks), ("n", [[1] * n for n in lens])):
        cache = tokenize_to_cache([str(tmp_path / f"{name}.parquet")], TokenizeConfig(batch_size=64),
                                  cache_dir, progress=False)
        assert cache.tokenizer_info is None
        got = _rows(cache)
        assert [g[0] for g in got] == ids                  # kept exactly: no BOS/EOS added
        assert [g[1] for g in got] == want_masks
        assert cache.lengths().tolist() == lens.tolist()
    # with a tokenizer, ids are range-checked against its vocabulary
    pq.write_table(pa.table({"input_ids": [[1, 2], [3, 60000]]}), tmp_path / "big.parquet")
    with pytest.raises(PacktoolInputError, match=r"big\.parquet, row 1: input_ids\[1\] is 60000, outside the tokenizer's vocabulary 0\.\.31999: give the tokenizer the ids were made with"):
        tokenize_to_cache([str(tmp_path / "big.parquet")], TokenizeConfig(tokenizer=MISTRAL), cache_dir,
                          progress=False)


def test_shape_override_and_unknown_columns(tmp_path, cache_dir):
    tok = Tokenizer.from_file(GPT2)
    cfg = TokenizeConfig(tokenizer=GPT2, shape="text", text_field="question", add_eos=False)
    cache = tokenize_to_cache([GSM8K], cfg, cache_dir, progress=False)
    with open(GSM8K) as f:
        first = json.loads(f.readline())["question"]
    assert _rows(cache)[0] == (tok.encode(first).ids, [1] * len(tok.encode(first).ids))
    # columns no shape knows (GSM8K's question/answer is known now: tests/tokenize/test_question_answer.py):
    # the error lists the columns and the flags
    unknown = tmp_path / "unknown.jsonl"
    unknown.write_text('{"foo": "a", "bar": "b"}\n')
    with pytest.raises(PacktoolInputError) as e:
        tokenize_to_cache([str(unknown)], TokenizeConfig(tokenizer=GPT2), cache_dir, progress=False)
    msg = str(e.value)
    assert "\n" not in msg and "unknown.jsonl" in msg
    assert "foo, bar" in msg and "prompt_field=" in msg and "shape=" in msg and "--" not in msg
    with pytest.raises(PacktoolInputError, match="needs column"):
        tokenize_to_cache([GSM8K], TokenizeConfig(tokenizer=GPT2, shape="chat", chat_template="chatml"),
                          cache_dir, progress=False)


def test_mixed_inputs_one_cache(cache_dir):
    """One run may mix shapes (the demo packs GSM8K, chats and PEPs together): source_index is
    global in read order and source_file points into cache.json inputs."""
    cfg = TokenizeConfig(tokenizer=MISTRAL, chat_template="mistral",
                         prompt_field="question", response_field="answer")
    from conftest import TASKMASTER
    cache = tokenize_to_cache([GSM8K, TASKMASTER, PEPS], cfg, cache_dir, progress=False)
    assert [d["shape"] for d in cache.meta["inputs"]] == ["fields", "chat", "text"]
    assert cache.num_rows == 200 + 200 + 5
    assert cache.source_indices().tolist() == list(range(405))
    sf = pq.read_table(cache.parquet_files[0], columns=["source_file"]).column(0).to_numpy()
    assert sf.tolist() == [0] * 200 + [1] * 200 + [2] * 5
    assert [f.path for f in cache.input_files] == [GSM8K, TASKMASTER, PEPS]
    assert cache.num_tokens == int(cache.lengths().sum())
