"""S50B-6: FORMAT.md's standalone reader read outputs whose manifest token counts are not the
slabs' (a shard entry's `tokens` / `loss_tokens`, `stats.physical_tokens` / `loss_tokens`: a
trainer sizes its schedule by them), which verify and every packtool reader refuse at open. Each
count, edited by one, goes to verify, packtool's reader and the standalone one: all refuse it."""
from __future__ import annotations

import pytest
from slab_support import format_reader, read_manifest, save_manifest, write_pack

from packtool.align import Alignment
from packtool.errors import PacktoolError


def _shard(key):
    return lambda man: man["shards"][0].__setitem__(key, man["shards"][0][key] + 1)


def _stats(key):
    return lambda man: man["stats"].__setitem__(key, man["stats"][key] + 1)


EDITS = {"shard_tokens": _shard("tokens"), "shard_loss_tokens": _shard("loss_tokens"),
         "stats_physical_tokens": _stats("physical_tokens"), "stats_loss_tokens": _stats("loss_tokens")}


def _verify(out):
    from packtool.verification import verify
    report = verify(out, workers=1)
    assert not report.ok and {p.check for p in report.problems} & {"shard_counts", "manifest_stats"}, report.problems


def _packtool(out):
    from packtool.hf import SlabDataset
    with pytest.raises(PacktoolError, match="manifest says|the shards hold"):
        SlabDataset(out)


def _standalone(out):
    with pytest.raises(ValueError, match="manifest says|the shards hold"):
        format_reader().open_output(out)


@pytest.mark.parametrize("door", [_verify, _packtool, _standalone], ids=["verify", "packtool", "standalone"])
@pytest.mark.parametrize("edit", list(EDITS))
def test_a_manifest_token_count_off_by_one_is_refused_by_every_reader(tmp_path, edit, door):
    out, _ = write_pack(str(tmp_path / "p"), [40, 70, 90, 30], Alignment(capacity=128))
    man = read_manifest(out)
    EDITS[edit](man)
    save_manifest(out, man)
    door(out)
