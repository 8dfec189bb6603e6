"""The tokenizer's own cache does not grow with distinct text (issue 23 class 8).
`tokenizers` caches each pre-token it merged (BPE and Unigram), up to 10,000 keys of up to 255
bytes per encode thread, at ~34 bytes per key byte. With a tokenizer that does not split words
(mistral) every short segment of a distinct chat is a key, and a pack of real chats grew
~110 MiB until the caches were full; packtool turns that cache off. A word-level tokenizer's
cache (gpt2: short keys, 16-25% of the encode CPU) is kept.

Measured as the C heap in use (glibc's mallinfo2, all arenas) after encoding many distinct
cacheable pre-tokens and dropping the encodings, in a fresh process; the control is the same
tokenizer as `tokenizers` loads it.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from conftest import GPT2, MISTRAL
from tokenizers import Tokenizer
from tokenizers import pre_tokenizers as pt

import packtool.heap as heap
from packtool.tokenize.encode import caches_words

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HELD = r"""
import ctypes, random, string, sys
from tokenizers import Tokenizer
from packtool.tokenize.encode import load_tokenizer
from packtool.tokenize.config import TokenizeConfig
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
path, how = sys.argv[1], sys.argv[2]
tok = Tokenizer.from_file(path) if how == "tokenizers" else load_tokenizer(path, TokenizeConfig()).tokenizer
rng = random.Random(0)
# 8,000 distinct keys of 120 letters: one pre-token each, whether or not words are split
texts = ["".join(rng.choices(string.ascii_lowercase, k=120)) for _ in range(8000)]
tok.encode_batch_fast(["warm up the encode threads"] * 64, add_special_tokens=False)
before = libc.mallinfo2().uordblks
for i in range(0, len(texts), 500):
    tok.encode_batch_fast(texts[i:i + 500], add_special_tokens=False)
print((libc.mallinfo2().uordblks - before) >> 20)
"""


def _held_mib(path: str, how: str) -> int:
    got = subprocess.run([sys.executable, "-c", HELD, path, how], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=ROOT), timeout=120)
    assert got.returncode == 0, got.stderr
    return int(got.stdout.split()[-1])


@pytest.mark.skipif(heap._LIBC is None, reason="measured with glibc's mallinfo2")
@pytest.mark.parametrize("tokenizer", [GPT2, MISTRAL], ids=["gpt2 (words: kept)", "mistral (segments: off)"])
def test_a_cache_keyed_by_segments_holds_nothing(tokenizer, tmp_path):
    path = str(tmp_path / "tokenizer.json")  # a fresh load, not the process's loaded one
    shutil.copy(tokenizer, path)
    default = _held_mib(path, "tokenizers")  # control: the probe sees the default cache fill
    assert default >= 16, default  # ~4 KiB a key
    held = _held_mib(path, "packtool")
    if tokenizer == MISTRAL:
        assert held <= 1, (held, default)
    else:
        assert held >= default // 2, (held, default)


@pytest.mark.parametrize("pre, words", [
    (None, False),
    (pt.Metaspace(split=False), False),
    (pt.Sequence([pt.Digits(), pt.Metaspace(split=False)]), False),
    (pt.Split("\n", "removed"), False),
    (pt.Metaspace(), True),
    (pt.ByteLevel(add_prefix_space=False), True),
    (pt.Whitespace(), True),
    (pt.Sequence([pt.Digits(), pt.WhitespaceSplit()]), True),
], ids=["none", "metaspace no split", "sequence no split", "split on newlines", "metaspace",
        "byte-level", "whitespace", "sequence of splits"])
def test_which_caches_are_keyed_by_words(pre, words):
    tok = Tokenizer.from_file(MISTRAL)
    tok.pre_tokenizer = pre
    assert caches_words(tok) is words
