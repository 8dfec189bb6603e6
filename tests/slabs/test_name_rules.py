"""S33-4: every rule that recognizes a name packtool made matches the WHOLE name. Python's `$`
also matches before a final newline, so `slabs-00000.parquet\n` passed the shard rule: verify
and every consumer read an output the documented `*.parquet` globs see as empty. Each
recognizer below takes its good name and refuses the same name with a trailing newline."""
from __future__ import annotations

import pytest

from packtool.megatron.checkpoint import CKPT
from packtool.output import lock, stale
from packtool.output.paths import temp_target
from packtool.side import SideColumn
from packtool.slabs import names


def _side_name_ok(n: str) -> bool:
    try:
        SideColumn(n, "int32")
    except Exception:
        return False
    return True


RECOGNIZERS = {  # name -> (predicate, a name it takes)
    "shard": (names.is_shard_name, "slabs-00000.parquet"),
    "shard-of-run": (names.is_shard_name, "slabs-0123456789ab-00001.parquet"),
    "intent": (lambda n: names.parse_intent(n, b'{"new": [], "old": []}') is not None,
               ".packtool-pending-0123456789ab.json"),
    "side-column": (_side_name_ok, "doc_id"),
    "megatron-checkpoint": (lambda n: bool(CKPT.match(n)), "mp_rank_00.pt"),
    "temporary": (lambda n: temp_target(n) is not None, ".out.json.packtool-tmp-12-ab12"),
    "spill": (lambda n: bool(stale.SPILL_NAMES(n)), "plan.pkl"),
    "cache-entry": (stale.entry_names, "cache.json"),
    "flat": (lambda n: bool(stale.FLAT_NAMES(n)), "tokens.i32"),
    "cache-root": (lambda n: bool(stale.CACHE_ROOT_NAMES(n)), "0123abcd"),
    "made-temporary": (lambda n: stale.made_pid(n) is not None, "packtool-tmp-12-abcd1234"),
    "stale-of-output": (lambda n: bool(stale._stale_pattern("/x/out").match(n)), ".out.packtool-tmp-12"),
}


@pytest.mark.parametrize("rule", list(RECOGNIZERS))
def test_a_trailing_newline_is_not_the_name(rule):
    ok, good = RECOGNIZERS[rule]
    assert ok(good), good
    assert not ok(good + "\n"), f"{rule} takes {good!r} + a newline"


def test_lock_text_is_whole():
    assert lock._LOCK_TEXT.match(lock.lock_text(12))
    assert not lock._LOCK_TEXT.match(lock.lock_text(12) + b"\n")


@pytest.mark.parametrize("name", ["slabs-\u0660\u0660\u0660\u0660\u0660.parquet", "slabs-00000.parquet\n",
                                  "xslabs-00000.parquet", "slabs-00000.parquet.x"])
def test_shard_rule_is_the_documented_pattern(name):
    """NNNNN is ASCII digits (`\\d` alone takes any Unicode digit), nothing before or after."""
    assert not names.is_shard_name(name)


def test_manifest_listing_a_newline_name_is_refused():
    from packtool.slabs.format import FormatError, shard_names
    with pytest.raises(FormatError, match="not a shard name packtool writes"):
        shard_names({"shards": [{"file": "slabs-00000.parquet\n"}]})
