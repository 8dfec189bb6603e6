"""Every checksum of a file reads it into one buffer, reused block after block (issue 23's 2%
bound): a fresh 4 MiB `bytes` per block went back to the system past glibc's trim threshold
and was faulted in again, ~1,000 page faults a block (+100-190k in a 1M-row pre-tokenized pack
hashing its shards). Counted in a thread of its own (an arena of its own), under the threshold
the shard writers run with (heap.writing_heap)."""
from __future__ import annotations

import hashlib
import os
import resource
import threading

import pytest
import xxhash

from packtool import heap
from packtool.tokenize import checksum

if heap._LIBC is None or not hasattr(resource, "RUSAGE_THREAD"):
    pytest.skip("glibc's arenas and per-thread counts only", allow_module_level=True)

BLOCKS = 12
PAGES = checksum._BLOCK // os.sysconf("SC_PAGE_SIZE")
DIGESTS = {
    "file_digest xxh3": lambda p: checksum.file_digest(p, "xxh3_128"),
    "file_digest sha256": lambda p: checksum.file_digest(p, "sha256"),
    "shard_checksum": checksum.shard_checksum,
    "sha256_file": checksum.sha256_file,
    "fast_digest": checksum.fast_digest,
    "both_digests": checksum.both_digests,
}


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    p = tmp_path_factory.mktemp("digest") / "shard.bin"
    p.write_bytes(os.urandom(BLOCKS * checksum._BLOCK + 12345))  # a short last block too
    data = p.read_bytes()
    return str(p), xxhash.xxh3_128(data).hexdigest(), hashlib.sha256(data).hexdigest()


def _in_thread(fn, path):
    out = {}

    def run():
        f0 = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        out["digest"] = fn(path)
        out["faults"] = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - f0
    t = threading.Thread(target=run)
    t.start()
    t.join()
    return out


@pytest.mark.parametrize("name", DIGESTS)
def test_a_digest_faults_one_buffer_in_not_one_per_block(big, name):
    path, xxh, sha = big
    with heap.writing_heap():
        _in_thread(DIGESTS[name], path)  # the thread's arena and the hasher's code, once
        got = _in_thread(DIGESTS[name], path)
    want = {"both_digests": (xxh, sha), "file_digest sha256": sha, "sha256_file": sha}.get(name, xxh)
    assert got["digest"] == want
    # one block's pages (the buffer), a few more for the hasher: not BLOCKS of them
    assert got["faults"] < 3 * PAGES, f"{name}: {got['faults']} page faults for {BLOCKS} blocks"
