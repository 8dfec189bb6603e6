"""Shared fixture paths: bundled real data slices and tokenizers under fixtures/ (no ../shared)."""
from __future__ import annotations

import os

# Triton kernels run under the interpreter on machines without a GPU. It must be set before
# anything imports triton (torch and megatron do, from other test modules in the same worker).
if not os.path.exists("/dev/nvidia0"):
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "fixtures")
DATA = os.path.join(FIXTURES, "data")
TOKENIZERS = os.path.join(FIXTURES, "tokenizers")

GSM8K = os.path.join(DATA, "gsm8k_train_200.jsonl")
TASKMASTER = os.path.join(DATA, "taskmaster4_chat_200.jsonl.gz")
PEPS = os.path.join(DATA, "peps_long5.jsonl.gz")
SHAREGPT = os.path.join(DATA, "fastchat_sharegpt_120.json")
ALPACA = os.path.join(DATA, "gpteacher_alpaca_200.json")

GPT2 = os.path.join(TOKENIZERS, "gpt2", "tokenizer.json")
MISTRAL_DIR = os.path.join(TOKENIZERS, "mistral-7b-v0.1")
MISTRAL = os.path.join(MISTRAL_DIR, "tokenizer.json")


def fixture_path(*parts: str) -> str:
    return os.path.join(FIXTURES, *parts)


@pytest.fixture
def cache_dir(tmp_path):
    """A fresh tokenized-cache root per test, so tests never share or reuse caches."""
    d = tmp_path / "cache"
    d.mkdir()
    return str(d)
