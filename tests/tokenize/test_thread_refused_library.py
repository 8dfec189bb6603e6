"""RB-8 + F3: a thread the system would not start was translated by the command line only. Through
the library (`packtool.pack`) the tokenizer's pool raised pyo3's PanicException, a BaseException a
caller's `except Exception` misses (the process ended), and threading's RuntimeError("can't start
new thread") was no packtool error; rust's own "thread ... panicked" lines printed before any line
of packtool's. Every thread packtool starts on pack's way (threads.start, workers' pools, rich's
bars) and the tokenizer's pool (tokenize.tokenizer_pool) now raise ThreadRefused (kind
`resources`): the limit and the fix, the command's line less its place. The real limits, in a
child, are tests/cli/test_thread_refused.py's (both doors)."""
from __future__ import annotations

import json
import os
import threading

import pytest
from conftest import GPT2, GSM8K

import packtool
from packtool.threads import ThreadRefused

# every thread a library pack starts, by its name's start (rich's bars' refresh threads: by their class)
THREADS = {"kernel warm-up": "packtool-warm", "input hashing": "packtool-input-sha", "encode pool": "packtool-encode",
           "cache parts": "packtool-parts", "flat store": "packtool-flat", "shard writers": "packtool-shard",
           "progress bars": "_RefreshThread", "pre-tokenized read-ahead": "packtool-read"}


def _inputs(tmp_path, thread: str) -> tuple[list[str], packtool.TokenizeConfig]:
    if thread != "pre-tokenized read-ahead":
        return [GSM8K], packtool.TokenizeConfig(tokenizer=GPT2, prompt_field="question", response_field="answer")
    rows = tmp_path / "ids.jsonl"  # token rows are decoded ahead of the rest (tokenize.prefetch.read_ahead)
    rows.write_text("".join(json.dumps({"input_ids": list(range(1, 2 + k % 50))}) + "\n" for k in range(300)))
    return [str(rows)], packtool.TokenizeConfig()


@pytest.mark.parametrize("thread", THREADS)
def test_a_refused_thread_is_packtools_error_through_the_library(tmp_path, monkeypatch, thread):
    real, asked = threading.Thread.start, []

    def start(self):
        if self.name.startswith(THREADS[thread]) or type(self).__name__ == THREADS[thread]:
            asked.append(self.name)
            raise RuntimeError("can't start new thread")
        return real(self)

    inputs, tokenize = _inputs(tmp_path, thread)
    from packtool.tokenize import hf_input
    from packtool.workers import thread_pool
    # the process's input-hashing pool, whose thread an earlier pack in this process started already
    monkeypatch.setattr(hf_input, "_HASH_POOL", thread_pool(1, "packtool-input-sha"))
    monkeypatch.setattr(threading.Thread, "start", start)
    with pytest.raises(Exception) as got:  # an Exception: a caller's `except Exception` catches it
        packtool.pack(inputs, tokenize=tokenize, output=str(tmp_path / "o"), cache_dir=str(tmp_path / "c"),
                      progress=True, shard_tokens=4096, workers=2)  # several shards: written in threads
    monkeypatch.undo()
    assert asked, f"no {THREADS[thread]} thread was started on this pack's way"
    assert isinstance(got.value, ThreadRefused) and got.value.kind == "resources", repr(got.value)
    assert str(got.value).startswith("could not start a thread (can't start new thread); "), str(got.value)
    assert "raise" in str(got.value) and "fewer threads" in str(got.value), str(got.value)


PanicException = type("PanicException", (BaseException,), {"__module__": "pyo3_runtime"})


class _Tokenizer:
    """A tokenizer whose pool does what rayon's does: `refuse` it panics, rust's hook writing its
    lines on fd 2 first; else it says `other` on fd 2 (a line of its own, not this refusal)."""

    def __init__(self, refuse: bool, other: bytes = b"") -> None:
        self.refuse, self.other = refuse, other

    def encode_batch_fast(self, texts, add_special_tokens=False):
        if self.refuse:
            os.write(2, b"thread '<unnamed>' panicked at rayon-core/src/registry.rs:168:10:\n")
            raise PanicException("The global thread pool has not been initialized.: ThreadPoolBuildError { kind: "
                                 "IOError(Os { code: 11, kind: WouldBlock, message: \"Resource temporarily "
                                 "unavailable\" }) }")
        os.write(2, self.other)
        self.other = b""
        return [list(t) for t in texts]


@pytest.mark.parametrize("refuse", [True, False])
def test_the_tokenizers_pool_started_once_its_refusal_said_in_one_error(monkeypatch, capfd, refuse):
    from packtool.tokenize import tokenizer_pool
    monkeypatch.setattr(tokenizer_pool, "_STARTED", set())
    tok = _Tokenizer(refuse, b"a line of the tokenizer's own\n")
    if refuse:
        with pytest.raises(ThreadRefused) as got:
            tokenizer_pool.encode(tok, ["x"], True)
        assert "(the tokenizer's thread pool: Resource temporarily unavailable)" in str(got.value), str(got.value)
        assert "RAYON_NUM_THREADS=1" in str(got.value), str(got.value)
        assert capfd.readouterr().err == ""  # rust's lines are this refusal: not printed
    else:
        assert tokenizer_pool.encode(tok, ["x"], True) == [["x"]]
        assert capfd.readouterr().err == "a line of the tokenizer's own\n"  # anything else is said after all
        assert os.getpid() in tokenizer_pool._STARTED


def test_a_refused_process_pool_thread_is_packtools_error_through_verify(tmp_path, monkeypatch):
    """R2B-5: a process pool's first submit starts the executor's manager thread; refused there,
    verify(workers >= 2) over several pieces gave a library caller RuntimeError."""
    import concurrent.futures.process as cfp
    out = str(tmp_path / "o")
    packtool.pack([GSM8K], tokenize=packtool.TokenizeConfig(tokenizer=GPT2, prompt_field="question",
                                                           response_field="answer"),
                  output=out, cache_dir=str(tmp_path / "c"), progress=False, shard_tokens=4096)
    from packtool import workers
    monkeypatch.setattr(workers, "_PROCESS_POOLS", {})  # a pool an earlier test started has its threads
    real, asked = threading.Thread.start, []

    def start(self):
        if isinstance(self, cfp._ExecutorManagerThread):
            asked.append(self.name)
            raise RuntimeError("can't start new thread")
        return real(self)
    monkeypatch.setattr(threading.Thread, "start", start)
    with pytest.raises(Exception) as got:
        packtool.verify(out, workers=2)
    monkeypatch.undo()
    assert asked, "verify started no process pool"
    assert isinstance(got.value, ThreadRefused) and got.value.kind == "resources", repr(got.value)
