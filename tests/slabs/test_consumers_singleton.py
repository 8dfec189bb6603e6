"""S32-5: a slab's `singleton` flag is held by every consumer to verify's rules (capacity and
singleton, FORMAT.md "What a reader checks"): set exactly on a lone sequence whose footprint
exceeds U, and only in an output packed with `--overflow singleton`. Each damage is re-signed
(bytes and checksum updated) so that only the per-row check can catch it."""
from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from slab_support import find_row, load_rows, save_rows, write_pack
from test_consumers_refuse import SHARD0, _consume

from packtool.align import Alignment
from packtool.planning.core import PackingConfig

pytest.importorskip("torch")

ALIGN = Alignment(capacity=256)
# a few sequences over U=256 (singletons under --overflow singleton, chunks under split)
LENGTHS = np.random.default_rng(5).integers(1, 40, 60) * 8 - 3
LENGTHS[[3, 17, 40]] = [300, 420, 290]


def _set_flag(pred, value):
    def edit(c):
        r = find_row(c, pred)
        c["singleton"][r] = value
    return edit


DAMAGES = {  # name -> (overflow policy of the pack, edit of shard 0's rows)
    "flag-set:split-pack": ("split", _set_flag(lambda r: True, True)),
    "flag-set:fitting-slab": ("singleton", _set_flag(lambda r: not r["singleton"], True)),
    "flag-cleared:lone-sequence-over-U": ("singleton", _set_flag(lambda r: bool(r["singleton"]), False)),
}
CONSUMERS = ("megatron-dataset", "hf", "inspect", "standalone-reader")


@pytest.fixture(scope="module")
def packs(tmp_path_factory):
    root = tmp_path_factory.mktemp("singleton")
    made = {}
    for policy in ("split", "singleton"):
        made[policy], _ = write_pack(str(root / policy), LENGTHS, ALIGN, PackingConfig("bfd", overflow=policy),
                                     shard_tokens=1 << 14, group_tokens=2048)
    assert any(load_rows(made["singleton"], SHARD0)["singleton"])  # the fixture holds a lone sequence over U

    def damaged(name):
        policy, edit = DAMAGES[name]
        d = str(root / name.replace(":", "-"))
        if not os.path.exists(d):
            shutil.copytree(made[policy], d)
            cols = load_rows(d, SHARD0)
            edit(cols)
            save_rows(d, SHARD0, cols)  # re-signed
        return d
    return made, damaged


@pytest.mark.parametrize("policy", ["split", "singleton"])
@pytest.mark.parametrize("consumer", CONSUMERS)
def test_the_clean_packs_are_read(packs, policy, consumer, tmp_path):
    made, _ = packs
    kind, got = _consume(consumer, made[policy], str(tmp_path))
    assert kind == "ok", got


@pytest.mark.parametrize("consumer", CONSUMERS)
@pytest.mark.parametrize("damage", list(DAMAGES))
def test_every_consumer_refuses_a_singleton_flag_verify_rejects(packs, damage, consumer, tmp_path):
    from packtool.verification.run import verify
    _, damaged = packs
    out = damaged(damage)
    report = verify(out, workers=1)
    assert not report.ok  # the premise: verify rejects it
    kind, got = _consume(consumer, out, str(tmp_path))
    assert kind == "refused", f"{consumer} read the damaged output ({damage}) without a word"
    assert consumer == "standalone-reader" or (SHARD0 in got and "singleton" in got), got
