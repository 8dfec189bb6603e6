"""S46B-5 on an object store: FORMAT.md's standalone reader holds each read after open_output to
the shard object it checked; an output replaced at the prefix since (another run's objects put
over the names, a shard deleted) is refused in one ValueError, "open the output again"."""
from __future__ import annotations

import os

import numpy as np
import pytest
from slab_support import format_reader, write_pack

from packtool.align import Alignment
from packtool.planning.core import PackingConfig
from packtool.storage import locate


def _pack(root, seed: int) -> str:
    out, _ = write_pack(str(root), np.arange(20, 200, 3), Alignment(capacity=256),
                        PackingConfig("bfd", overflow="split", seed=seed), shard_tokens=1 << 11)
    return out


def _upload(local: str, uri: str) -> None:
    for name in os.listdir(local):
        locate(uri).join(name).write_bytes(open(os.path.join(local, name), "rb").read())


@pytest.mark.parametrize("how", ["another slab order put over", "a shard deleted"])
def test_a_read_after_the_store_output_was_replaced_is_refused(how, s3, tmp_path):
    mod, out = format_reader(), f"{s3}/out"
    _upload(_pack(tmp_path / "a", 0), out)
    man = mod.open_output(out)
    shard = man["shards"][-1]["file"]
    mod.read_slab_for_cp_rank(out, shard, 0, 0, man)
    if how == "a shard deleted":
        locate(out).join(shard).delete()
    else:
        _upload(_pack(tmp_path / "b", 1), out)
    with pytest.raises(ValueError) as e:
        mod.read_slab_for_cp_rank(out, shard, 0, 0, man)
    message = str(e.value)
    assert "\n" not in message and shard in message and "open the output again" in message, message
