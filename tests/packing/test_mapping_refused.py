"""F3: a file packtool maps (the flat token store's tokens and offsets, a lengths file) that the
system would not map for memory (ENOMEM: a ulimit -v the file does not fit under) reached a library
caller as a bare OSError; only the command line said it as out of memory. Every such mapping now
raises packtool's out-of-memory error naming the file (free_memory.mapped: DecodeOutOfMemory, a
MemoryError, kind `resources`), as every read of a file already did. Over every library door that
maps a file: the refusal is the system's (mmap's ENOMEM, as under ulimit -v), for the one file."""
from __future__ import annotations

import errno
import mmap
import os

import pytest
from conftest import GPT2, GSM8K

import packtool
from packtool.free_memory import DecodeOutOfMemory


def _refusing(monkeypatch, name: str) -> list[str]:
    """mmap.mmap (numpy's memmap and np.load's mmap_mode map through it) refusing files called `name`."""
    real, refused = mmap.mmap, []

    def refusing(fileno, *args, **kwargs):
        path = os.readlink(f"/proc/self/fd/{fileno}")
        if os.path.basename(path) == name:
            refused.append(path)
            raise OSError(errno.ENOMEM, os.strerror(errno.ENOMEM))
        return real(fileno, *args, **kwargs)

    monkeypatch.setattr(mmap, "mmap", refusing)
    return refused


@pytest.fixture(scope="module")
def cached(tmp_path_factory):
    """GSM8K's cache entry (under `c`) and a lengths file."""
    base = tmp_path_factory.mktemp("mapped")
    packtool.pack([GSM8K], tokenize=packtool.TokenizeConfig(tokenizer=GPT2, prompt_field="question",
                                                            response_field="answer"),
                  output=str(base / "out"), cache_dir=str(base / "c"))
    (base / "l.txt").write_text("3\n5\n")
    return base


def _tokenize():
    return packtool.TokenizeConfig(tokenizer=GPT2, prompt_field="question", response_field="answer")


def _entry(base) -> str:
    return next(os.path.join(d, n) for d, dirs, _ in os.walk(base / "c") for n in dirs
                if os.path.exists(os.path.join(d, n, "cache.json")))


def _cache_rows(base):
    from packtool.tokenize.cache import TokenizedCache
    c = TokenizedCache(_entry(base))
    c.flat_only = True  # its rows read from the flat store (as a pre-tokenized entry's are)
    return c.read_rows([0, 1])


def _lengths(base):
    from packtool.planning.lengths import load_lengths
    return load_lengths(str(base / "l.txt"))


# door -> (the call, the file it maps)
DOORS = {
    "pack, planning in row shards": (lambda b: packtool.pack([GSM8K], tokenize=_tokenize(), dry_run=True,
                                                             cache_dir=str(b / "c")), "offsets.npy"),
    "pack, writing": (lambda b: packtool.pack([GSM8K], tokenize=_tokenize(), output=str(b / "o2"),
                                              cache_dir=str(b / "c")), "tokens.i32"),
    "verify against the source": (lambda b: packtool.verify(str(b / "out"), source_dir=os.path.join(_entry(b), "flat")),
                                  "tokens.i32"),
    "the cache's rows": (_cache_rows, "tokens.i32"),
    "a lengths file": (_lengths, "l.txt"),
}


@pytest.mark.parametrize("door", DOORS)
def test_a_mapping_refused_for_memory_is_packtools_out_of_memory(cached, monkeypatch, door):
    call, name = DOORS[door]
    refused = _refusing(monkeypatch, name)
    with pytest.raises(MemoryError) as got:
        call(cached)
    monkeypatch.undo()
    assert refused, f"{door} mapped no {name}"
    e = got.value
    assert isinstance(e, DecodeOutOfMemory) and e.path == refused[0], (type(e), getattr(e, "path", None), refused)
    assert str(e).startswith(f"{refused[0]}: out of memory mapping it (could not map it into memory"), str(e)
    assert "is not at fault" in str(e), str(e)
