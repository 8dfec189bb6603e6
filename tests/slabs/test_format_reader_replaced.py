"""S46B-5: FORMAT.md's standalone reader, used as its example shows (`open_output` once, then
`read_slab_for_cp_rank(..., manifest)` per slab), read on after another run replaced the output
(`pack --overwrite`): the epoch mixed both outputs without a word, or a smaller output ended in
pyarrow's bare IndexError. Every later read is held to the shard open_output checked: each way
an output's shard comes to be another file (the output replaced by one of another slab order,
by a smaller one, one shard copied over from another output) is refused in one ValueError
naming the shard and "open the output again"; the same bytes again read on. A manifest that did
not come from open_output is held to the shard's row count (a row past it: the ValueError)."""
from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from slab_support import format_reader as _reader
from slab_support import write_pack

from packtool.align import Alignment
from packtool.planning.core import PackingConfig

LENGTHS = np.arange(20, 200, 3)


def _pack(root, lengths=LENGTHS, seed=0, shard_tokens=1 << 20) -> str:
    """A local output of synthetic rows (the real writer), its folder."""
    out, _ = write_pack(str(root), lengths, Alignment(capacity=256), PackingConfig("bfd", overflow="split", seed=seed),
                        shard_tokens=shard_tokens)
    return out


def _swap(out: str, other: str) -> None:
    """As `pack --overwrite` puts its output in place: the folder, renamed over."""
    os.rename(out, out + ".old")
    os.rename(other, out)


REPLACEMENTS = {
    "another slab order": lambda out, tmp: _swap(out, _pack(tmp / "b", seed=1)),
    "a smaller output": lambda out, tmp: _swap(out, _pack(tmp / "b", LENGTHS[: len(LENGTHS) // 3])),
    "one shard copied over": lambda out, tmp: shutil.copyfile(os.path.join(_pack(tmp / "b", seed=1),
                                                                           "slabs-00000.parquet"),
                                                              os.path.join(out, "slabs-00000.parquet")),
}


@pytest.mark.parametrize("how", REPLACEMENTS)
def test_a_read_after_the_output_was_replaced_is_refused(how, tmp_path):
    mod, out = _reader(), _pack(tmp_path / "a")
    man = mod.open_output(out)
    shard, rows = man["shards"][0]["file"], man["shards"][0]["rows"]
    assert rows > 3, rows
    first = [mod.read_slab_for_cp_rank(out, shard, i, 0, man)[0].tobytes() for i in range(rows // 2)]
    REPLACEMENTS[how](out, tmp_path)
    for row in (rows // 2, rows - 1):
        with pytest.raises(ValueError) as e:
            mod.read_slab_for_cp_rank(out, shard, row, 0, man)
        message = str(e.value)
        assert "\n" not in message and shard in message and "open the output again" in message, message
    if how == "one shard copied over":  # no output packtool wrote now: opened again, refused whole
        with pytest.raises(ValueError, match="differ from the manifest"):
            mod.open_output(out)
        return
    again = mod.open_output(out)  # opened again: read from the start, the new output's own rows
    assert len(mod.read_slab_for_cp_rank(out, shard, 0, 0, again)[0]) and first


def test_a_read_of_a_shard_gone_since_is_refused(tmp_path):
    """The output replaced by one of fewer shards: a later shard's read named it, in pyarrow's words."""
    mod, out = _reader(), _pack(tmp_path / "a", shard_tokens=1 << 11)
    man = mod.open_output(out)
    assert len(man["shards"]) > 1
    last = man["shards"][-1]["file"]
    mod.read_slab_for_cp_rank(out, last, 0, 0, man)
    _swap(out, _pack(tmp_path / "b", LENGTHS[: len(LENGTHS) // 3]))
    assert not os.path.exists(os.path.join(out, last))
    with pytest.raises(ValueError) as e:
        mod.read_slab_for_cp_rank(out, last, 0, 0, man)
    message = str(e.value)
    assert "\n" not in message and last in message and "gone since" in message and "open the output again" \
        in message, message


def test_the_same_bytes_again_read_on(tmp_path):
    mod, out = _reader(), _pack(tmp_path / "a")
    man = mod.open_output(out)
    shard, rows = man["shards"][0]["file"], man["shards"][0]["rows"]
    before = [mod.read_slab_for_cp_rank(out, shard, i, 0, man)[0].tobytes() for i in range(rows)]
    _swap(out, _pack(tmp_path / "b"))  # the same pack again: the same bytes
    assert [mod.read_slab_for_cp_rank(out, shard, i, 0, man)[0].tobytes() for i in range(rows)] == before


def test_a_manifest_not_from_open_output_is_held_to_the_shards_rows(tmp_path):
    mod, out = _reader(), _pack(tmp_path / "a")
    man = mod.open_output(out)
    del man["_opened"]  # a caller's own manifest dict
    shard, rows = man["shards"][0]["file"], man["shards"][0]["rows"]
    _swap(out, _pack(tmp_path / "b", LENGTHS[: len(LENGTHS) // 3]))
    with pytest.raises(ValueError, match="open the output again"):
        mod.read_slab_for_cp_rank(out, shard, rows - 1, 0, man)
