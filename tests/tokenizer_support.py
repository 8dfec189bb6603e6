"""The tokenizer-config tests' shared asks of a tokenizer folder: the library's refusal of it,
the ids pack tokenizes rows to with it, and the model's own tokenizer's ids (the oracle)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from packtool.errors import PacktoolInputError
from packtool.tokenize import tokenize_to_cache
from packtool.tokenize.config import TokenizeConfig
from packtool.tokenize.encode import load_tokenizer


def refused_loading(folder: str) -> PacktoolInputError:
    """The error load_tokenizer raises for the tokenizer folder `folder` (it must raise one)."""
    with pytest.raises(PacktoolInputError) as e:
        load_tokenizer(folder, TokenizeConfig(tokenizer=folder))
    return e.value


def packed_ids(folder: str, rows: list[dict], tmp_path, template: str | None = None) -> list[list[int]]:
    """Each row's ids as pack tokenizes them with the folder (the cache pack reads), in row order."""
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cache = tokenize_to_cache(str(data), TokenizeConfig(tokenizer=folder, add_bos=False, add_eos=False,
                                                        chat_template=template),
                              cache_dir=str(tmp_path / "cache"), progress=False)
    got = cache.read_rows(np.arange(cache.num_rows))
    return [got.input_ids[a:b].tolist() for a, b in zip(got.offsets[:-1], got.offsets[1:])]


def oracle_ids(folder: str, text: str) -> list[int]:
    """The ids transformers' AutoTokenizer gives `text` with the folder, no special tokens added."""
    import transformers
    return transformers.AutoTokenizer.from_pretrained(folder)(text, add_special_tokens=False)["input_ids"]
