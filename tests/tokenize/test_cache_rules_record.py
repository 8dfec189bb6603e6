"""An entry's content changes only with CACHE_VERSION: a rule that changes what a tokenized cache
entry holds (tests/cache_rules_corpus.py's corpus, one case per rule) must bump the version, or
users keep training on entries built under the old rule (their key is the same)."""
import json

import pytest

from cache_rules_corpus import CASES, RECORD, entry_of, versions

with open(RECORD) as _f:
    REC = json.load(_f)


def test_the_record_is_of_this_cache_version():
    now = versions()
    assert REC["cache_version"] == now["cache_version"], (
        f"CACHE_VERSION is {now['cache_version']}, the corpus was recorded under {REC['cache_version']}: record it "
        "again (PYTHONPATH=. python tests/cache_rules_corpus.py --record) and commit the record with the bump")
    assert sorted(REC["cases"]) == sorted(CASES), "a case added or removed: record again"


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_entry_changes_only_with_the_cache_version(name, tmp_path):
    if REC["tokenizers"] != versions()["tokenizers"]:
        pytest.skip(f"recorded under tokenizers {REC['tokenizers']}: ids may move with the library")
    got = entry_of(name, str(tmp_path))
    assert got == REC["cases"][name], (
        f"case {name}: a cache entry now holds other content than under CACHE_VERSION {REC['cache_version']} "
        "(or is refused / no longer refused): a rule changed what entries hold. Bump CACHE_VERSION in "
        "packtool/tokenize/cache_entry.py with a line saying why, then record the corpus again "
        "(PYTHONPATH=. python tests/cache_rules_corpus.py --record)")
