"""S37-2: every file of an output that FORMAT.md's standalone reader opens (each listed shard,
`.manifest.json`, an older output's `manifest.json`) is checked to be a regular file before it is
opened, as packtool's own consumers do: a FIFO in its place blocked the reader for ever (no
writer), and a `.manifest.json` FIFO sent it to the older name ("No such file manifest.json").
The same outputs go to packtool's consumers, which must refuse them too, in one line."""
from __future__ import annotations

import os
import shutil
import socket
import threading

import numpy as np
import pytest
from slab_support import format_reader, write_pack

from packtool.align import Alignment
from packtool.errors import PacktoolError

SHARD = "slabs-00000.parquet"


def _socket(p):
    s = socket.socket(socket.AF_UNIX)
    s.bind(p)
    s.close()


def _link_to_fifo(p):
    """A link inside the folder to a FIFO inside it: the link rule (no link out) passes it."""
    os.mkfifo(os.path.join(os.path.dirname(p), ".pipe"))
    os.symlink(".pipe", p)


KINDS = {"fifo": os.mkfifo, "folder": os.mkdir, "socket": _socket, "link-to-fifo": _link_to_fifo}
PLACES = {"shard": SHARD, "manifest": ".manifest.json", "older-manifest": "manifest.json"}


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    return write_pack(str(tmp_path_factory.mktemp("kinds")), np.arange(10, 40), Alignment(capacity=64))[0]


def _damaged(packed, tmp_path, place, kind):
    out = str(tmp_path / "out")
    shutil.copytree(packed, out)
    if place == "older-manifest":  # an output written before the rename: only manifest.json
        os.rename(os.path.join(out, ".manifest.json"), os.path.join(out, "manifest.json"))
    os.remove(os.path.join(out, PLACES[place]))
    KINDS[kind](os.path.join(out, PLACES[place]))
    return out


class _FifoWatch:
    """Notes whether anything opened the output's FIFO, and lets it go: opening its write end
    without blocking succeeds only while a reader holds it open (else ENXIO), and closing it hands
    that reader an EOF, so a reader that opens the FIFO fails this test instead of hanging it."""

    def __init__(self, out):
        self.fifos = [os.path.join(out, n) for n in os.listdir(out) if os.path.exists(os.path.join(out, n))
                      and not os.path.isfile(os.path.join(out, n)) and not os.path.isdir(os.path.join(out, n))
                      and os.path.realpath(os.path.join(out, n)) == os.path.join(out, n)]
        self.opened, self._stop = False, threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self):
        while not self._stop.wait(0.05):
            for f in self.fifos:
                try:
                    os.close(os.open(f, os.O_WRONLY | os.O_NONBLOCK))
                    self.opened = True
                except OSError:  # ENXIO: no reader; ENXIO/ENOTDIR/EISDIR for a socket or folder
                    pass

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def _reader(out):
    return format_reader().read_slab_for_cp_rank(out, SHARD, 0, 0)


def _inspect(out):
    from packtool import inspect
    return inspect(out)


def _hf(out):
    from packtool.hf import SlabDataset
    return SlabDataset(out)[0]


def _megatron(out):
    from packtool.megatron.dataset import PackedSlabDataset
    return PackedSlabDataset(out)


CONSUMERS = {"standalone-reader": _reader, "inspect": _inspect, "hf": _hf, "megatron-dataset": _megatron}


@pytest.mark.parametrize("consumer", list(CONSUMERS))
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("place", list(PLACES))
def test_a_file_of_the_output_that_is_no_regular_file_is_refused_unopened(packed, tmp_path, place, kind, consumer):
    if consumer == "megatron-dataset":
        pytest.importorskip("torch")
    out = _damaged(packed, tmp_path, place, kind)
    errors = ValueError if consumer == "standalone-reader" else PacktoolError  # the example has no type of its own
    with _FifoWatch(out) as watch:
        with pytest.raises(errors) as e:
            CONSUMERS[consumer](out)
    msg = str(e.value)
    assert not watch.opened, f"{consumer} opened the FIFO at {PLACES[place]} (without a writer it blocks for ever)"
    assert "\n" not in msg, msg
    said = PLACES[place] in msg and ("regular file" in msg or "not a plain file" in msg)
    # packtool takes an older manifest.json only when it is a regular file (data folders hold files of
    # that name of their own: slabs.format._refuse_manifest_kind), and says there is no manifest
    older = place == "older-manifest" and consumer != "standalone-reader" and "no .manifest.json" in msg
    assert said or older, msg
    if place == "manifest":  # the FIFO is the manifest: no fallback to the older name
        assert "manifest.json" not in msg.replace(".manifest.json", ""), msg


def test_the_clean_output_reads(packed):
    ids, mask, cu, side = _reader(packed)
    assert ids.size and mask.size == ids.size
