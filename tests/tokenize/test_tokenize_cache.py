"""Tokenized cache: schema, reuse without re-tokenizing, fingerprint sensitivity, random access,
empty/all-masked policy, and no half-written cache after a failure."""
from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import GPT2, GSM8K, MISTRAL, MISTRAL_DIR, PEPS, SHAREGPT

import packtool.tokenize.pipeline as pipeline
from packtool.errors import PacktoolInputError
from packtool.tokenize import TokenizedCache, tokenize_to_cache
from packtool.tokenize.cache import CacheWriter
from packtool.tokenize.config import TokenizeConfig

GSM_CFG = TokenizeConfig(tokenizer=GPT2, prompt_field="question", response_field="answer")


def _count_encodes(monkeypatch) -> list[int]:
    calls = [0]
    real = pipeline.start_encode

    def counting(tok, rb):
        calls[0] += 1
        return real(tok, rb)
    monkeypatch.setattr(pipeline, "start_encode", counting)
    return calls


def test_schema_and_cache_json(cache_dir):
    cache = tokenize_to_cache([GSM8K], GSM_CFG, cache_dir, progress=False)
    schema = pq.read_schema(cache.parquet_files[0])
    assert schema.field("input_ids").type.value_type == pa.int32()
    assert schema.field("loss_mask").type.value_type == pa.uint8()
    assert schema.field("length").type == pa.int32()
    assert schema.field("source_index").type == pa.int64()
    assert schema.field("source_file").type == pa.int32()
    with open(os.path.join(cache.root, "cache.json")) as f:
        meta = json.load(f)
    assert meta["fingerprint"] == cache.fingerprint and cache.root.endswith(cache.fingerprint[:32])
    assert os.listdir(cache.path) == ["part-00000.parquet"]
    assert meta["num_rows"] == 200 and meta["skipped"]["empty"] == 0
    (path, size, sha), = cache.input_files
    assert path == GSM8K and size == os.path.getsize(GSM8K) and len(sha) == 64
    info = cache.tokenizer_info
    assert (info.eos_id, info.pad_id, info.vocab_size) == (50256, 50256, 50257)
    assert len(info.sha256) == 64 and info.chat_template is None
    # a user can read the cache with plain pyarrow
    t = pq.read_table(cache.path)
    assert t.num_rows == 200 and t.column("length").to_numpy().sum() == cache.num_tokens
    assert not [d for d in os.listdir(cache_dir) if d.startswith(".tmp")]


def test_reuse_does_not_retokenize(monkeypatch, cache_dir):
    calls = _count_encodes(monkeypatch)
    first = tokenize_to_cache([GSM8K], GSM_CFG, cache_dir, progress=False)
    n_first = calls[0]
    assert n_first > 0 and not first.reused
    mtime = os.stat(os.path.join(first.root, "cache.json")).st_mtime_ns
    again = tokenize_to_cache([GSM8K], TokenizeConfig(tokenizer=GPT2, prompt_field="question",
                                                      response_field="answer", batch_size=7),
                              cache_dir, progress=False)
    assert again.reused and again.path == first.path and calls[0] == n_first
    assert os.stat(os.path.join(first.root, "cache.json")).st_mtime_ns == mtime
    np.testing.assert_array_equal(again.lengths(), first.lengths())
    # opening the directory directly gives the same cache
    assert TokenizedCache(first.path).num_tokens == TokenizedCache(first.root).num_tokens == first.num_tokens


def test_fingerprint_changes_with_inputs_tokenizer_template_options(tmp_path, cache_dir):
    base = tokenize_to_cache([SHAREGPT], TokenizeConfig(tokenizer=GPT2, chat_template="chatml"),
                             cache_dir, progress=False).fingerprint
    variants = [
        TokenizeConfig(tokenizer=MISTRAL, chat_template="chatml"),
        TokenizeConfig(tokenizer=GPT2, chat_template="llama3"),
        TokenizeConfig(tokenizer=GPT2, chat_template="chatml", add_eos=True),
    ]
    fps = {tokenize_to_cache([SHAREGPT], v, cache_dir, progress=False).fingerprint for v in variants}
    assert base not in fps and len(fps) == 3
    # same content at another path / touched file -> new key (path, size, mtime are the key)
    copy = tmp_path / "copy.json"
    copy.write_bytes(open(SHAREGPT, "rb").read())
    c = tokenize_to_cache([str(copy)], TokenizeConfig(tokenizer=GPT2, chat_template="chatml"), cache_dir,
                          progress=False)
    assert c.fingerprint != base and c.input_files[0].sha256 == _sha(SHAREGPT)


def _sha(path):
    import hashlib
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_read_rows_random_access_across_row_groups(monkeypatch, cache_dir):
    monkeypatch.setattr(CacheWriter, "ROWS_PER_GROUP", 16)
    cache = tokenize_to_cache([GSM8K], TokenizeConfig(tokenizer=GPT2, prompt_field="question",
                                                      response_field="answer", batch_size=10),
                              cache_dir, progress=False)
    assert pq.ParquetFile(cache.parquet_files[0]).metadata.num_row_groups > 5
    t = pq.read_table(cache.path)
    all_ids, all_mask = t.column("input_ids").to_pylist(), t.column("loss_mask").to_pylist()
    rng = np.random.default_rng(1)
    idx = np.concatenate([rng.permutation(200)[:77], [5, 5, 199, 0]])
    rows = cache.read_rows(idx)
    assert rows.offsets.tolist()[-1] == rows.input_ids.size == rows.loss_mask.size
    for k, i in enumerate(idx):
        a, b = rows.offsets[k], rows.offsets[k + 1]
        assert rows.input_ids[a:b].tolist() == all_ids[i]
        assert rows.loss_mask[a:b].tolist() == all_mask[i]
    assert rows.input_ids.dtype == np.int32 and rows.loss_mask.dtype == np.uint8
    assert cache.read_rows(np.zeros(0, np.int64)).offsets.tolist() == [0]
    with pytest.raises(IndexError):
        cache.read_rows([200])


def _jsonl(tmp_path, name, rows):
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(p)


def test_empty_and_all_masked_rows(tmp_path, cache_dir):
    rows = [{"question": "q1", "answer": "a1"}, {"question": "q2", "answer": ""},
            {"question": "", "answer": "a3"}, {"question": "q4", "answer": "a4"}]
    path = _jsonl(tmp_path, "qa.jsonl", rows)
    cfg = TokenizeConfig(tokenizer=GPT2, prompt_field="question", response_field="answer")
    # an empty answer, and an empty question, are empty examples as a null one is (L5)
    with pytest.raises(PacktoolInputError, match=r"qa\.jsonl, row 1: empty example: answer is null, missing or empty"
                                                 r".*on_empty='skip'"):
        tokenize_to_cache([path], cfg, cache_dir, progress=False)
    text = _jsonl(tmp_path, "t.jsonl", [{"text": "hello"}, {"text": "   "}, {"text": "bye"}])
    with pytest.raises(PacktoolInputError, match=r"t\.jsonl, row 1: empty example"):
        tokenize_to_cache([text], TokenizeConfig(tokenizer=GPT2), cache_dir, progress=False)
    assert not [d for d in os.listdir(cache_dir) if d.startswith(".tmp")]   # nothing half-written
    cache = tokenize_to_cache([path, text], TokenizeConfig(tokenizer=GPT2, prompt_field="question",
                                                           response_field="answer", on_empty="skip"),
                              cache_dir, progress=False)
    assert cache.skipped == {"empty": 3, "all_masked": 0, "rows": [1, 2, 5]}
    assert cache.num_rows == 4 and cache.source_indices().tolist() == [0, 3, 4, 6]
    assert cache.meta["num_source_rows"] == 7


def test_all_masked_chat_and_skip_everything(tmp_path, cache_dir):
    chats = [{"messages": [{"role": "user", "content": "hi"}]}]
    path = _jsonl(tmp_path, "c.jsonl", chats)
    with pytest.raises(PacktoolInputError, match="row 0: example with no loss tokens"):
        tokenize_to_cache([path], TokenizeConfig(tokenizer=GPT2, chat_template="chatml"), cache_dir, progress=False)
    # says which input, why (1 with no loss tokens), and what to check
    with pytest.raises(PacktoolInputError, match=r"c\.jsonl: every row was skipped .*0 empty, 1 with no "
                       r"loss tokens.*shape, text_field"):
        tokenize_to_cache([path], TokenizeConfig(tokenizer=GPT2, chat_template="chatml", on_empty="skip"),
                          cache_dir, progress=False)


def test_input_and_tokenizer_errors(tmp_path, cache_dir):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(PacktoolInputError, match=r"empty\.jsonl: empty dataset \(no rows\): remove it"):
        tokenize_to_cache([str(empty)], GSM_CFG, cache_dir, progress=False)
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), tmp_path / "e.parquet")
    with pytest.raises(PacktoolInputError, match="empty dataset"):
        tokenize_to_cache([str(tmp_path / "e.parquet")], TokenizeConfig(tokenizer=GPT2), cache_dir, progress=False)
    with pytest.raises(PacktoolInputError, match="tokenizer file not found"):
        tokenize_to_cache([PEPS], TokenizeConfig(tokenizer=str(tmp_path / "nope.json")), cache_dir)
    (tmp_path / "tokdir").mkdir()
    (tmp_path / "tokdir" / "tokenizer.model").write_bytes(b"x")
    with pytest.raises(PacktoolInputError, match="no tokenizer.json in folder.*tokenizer.model"):
        tokenize_to_cache([PEPS], TokenizeConfig(tokenizer=str(tmp_path / "tokdir")), cache_dir)
    with pytest.raises(PacktoolInputError, match="needs tokenizer"):
        tokenize_to_cache([PEPS], TokenizeConfig(), cache_dir)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(PacktoolInputError, match="cannot load tokenizer"):
        tokenize_to_cache([PEPS], TokenizeConfig(tokenizer=str(bad)), cache_dir)
    assert os.listdir(cache_dir) == []


def test_interrupted_build_leaves_nothing(monkeypatch, tmp_path, cache_dir):
    def boom(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(pipeline, "encode_rendered", boom)
    with pytest.raises(KeyboardInterrupt):
        tokenize_to_cache([GSM8K], GSM_CFG, cache_dir, progress=False)
    assert os.listdir(cache_dir) == []
    monkeypatch.undo()
    assert not tokenize_to_cache([GSM8K], GSM_CFG, cache_dir, progress=False).reused


def test_folder_tokenizer_specials(cache_dir):
    cache = tokenize_to_cache([PEPS], TokenizeConfig(tokenizer=MISTRAL_DIR, add_eos=False), cache_dir,
                              progress=False)
    info = cache.tokenizer_info
    assert (info.bos_id, info.eos_id, info.bos_token, info.eos_token) == (1, 2, "<s>", "</s>")
    assert info.config_sha256 is not None and info.vocab_size == 32000
    assert cache.read_rows([0]).input_ids[-1] != 2          # add_eos=False honoured


def test_config_errors_are_input_errors():
    with pytest.raises(PacktoolInputError, match="shape must be one of"):
        TokenizeConfig(shape="csv")
    with pytest.raises(PacktoolInputError, match="on_empty must be"):
        TokenizeConfig(on_empty="drop")
    with pytest.raises(PacktoolInputError, match="go together"):
        TokenizeConfig(prompt_field="question")
