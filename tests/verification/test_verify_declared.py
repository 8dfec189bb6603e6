"""Manifest fields that record a policy or a declaration another field repeats must agree
(verification/declared.py): each edit below keeps every shard valid and re-signed where it
touches one, and was passed by verify and verify --source before (S31-11, S31-18). Every edit
x (verify, verify --source) fails with `manifest_declared`."""
from __future__ import annotations

import os
import shutil

import pyarrow.parquet as pq
import pytest
from side_support import side_rows, write_input
from slab_support import read_manifest, resign, save_manifest

from packtool.align import Alignment
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig
from packtool.verification.run import source_store, verify

CFG = TokenizeConfig(shape="tokens", side_columns=("lp",), support_columns=("sup",))


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    root = tmp_path_factory.mktemp("decl")
    ids, lp, sup = side_rows(n=60, seed=5)
    inp = write_input(str(root / "in.parquet"), ids, lp, sup)
    out = str(root / "packed")
    pack([inp], Alignment(tp=2, cp=2, capacity=256), PackingConfig("bfd", overflow="split"), CFG,
         output=out, cache_dir=str(root / "cache"))
    src, _ = source_store([inp], CFG, cache_dir=str(root / "srccache"))
    return out, src


def _drop_column(out: str, man: dict, name: str) -> None:
    for s in man["shards"]:
        path = os.path.join(out, s["file"])
        pq.write_table(pq.read_table(path).drop_columns([name]), path)
    man["side_columns"] = [c for c in man["side_columns"] if c["name"] != name]
    save_manifest(out, man)
    for s in man["shards"]:
        resign(out, s["file"])


def _set(*path, value):
    def edit(out, man):
        d = man
        for k in path[:-1]:
            d = d[k]
        d[path[-1]] = value(d.get(path[-1])) if callable(value) else value
        save_manifest(out, man)
    return edit


def _kind(out, man):
    next(c for c in man["side_columns"] if c["name"] == "sup")["kind"] = "values"
    save_manifest(out, man)


def _both(*edits):
    def edit(out, man):
        for e in edits:
            e(out, man)
    return edit


EDITS = {
    # side_columns against input.tokenize (S31-11)
    "support_column_dropped": lambda out, man: _drop_column(out, man, "sup"),
    "values_column_dropped": lambda out, man: _drop_column(out, man, "lp"),
    "support_kind_to_values": _kind,
    "tokenize_names_another": _set("input", "tokenize", "side_columns", value=["lp", "zz"]),
    # the overflow policy's figures (S31-18)
    "overflow_policy_differs": _set("stats", "overflow", "policy", value="truncate"),
    "tokens_dropped_in_changes": _set("stats", "changes", "tokens_dropped", value=5),
    "tokens_dropped_both": _both(_set("stats", "changes", "tokens_dropped", value=5),
                                 _set("stats", "overflow", "tokens_dropped", value=5)),
    "singletons_under_split": _set("stats", "overflow", "singletons", value=2),
    "sequences_split_off_by_one": _set("stats", "changes", "sequences_split", value=lambda v: v + 1),
    "targets_lost_hidden": _set("stats", "changes", "targets_lost", value=0),
    # skipped rows under on_empty error (S31-18)
    "empty_skipped": _set("stats", "skipped_rows", "empty", value=3),
    "empty_skipped_both": _both(_set("stats", "skipped_rows", "empty", value=3),
                                _set("stats", "changes", "rows_skipped_empty", value=3)),
    "all_masked_skipped": _set("stats", "skipped_rows", "all_masked", value=1),
    # the non-finite counts name the float side columns
    "nan_count_of_int_column": _set("stats", "side_nan", "sup", value=0),
}


def test_the_clean_output_passes(clean):
    out, src = clean
    assert read_manifest(out)["stats"]["changes"]["sequences_split"] > 0  # the split figures are exercised
    for r in (verify(out, workers=1), verify(out, source_dir=src, workers=1)):
        assert r.ok, r.problems


@pytest.mark.parametrize("with_source", [False, True], ids=["verify", "verify--source"])
@pytest.mark.parametrize("edit", sorted(EDITS))
def test_each_edit_fails(clean, tmp_path, edit, with_source):
    out, src = clean
    d = str(tmp_path / "p")
    shutil.copytree(out, d)
    EDITS[edit](d, read_manifest(d))
    r = verify(d, source_dir=src if with_source else None, workers=1)
    # the non-finite counts' keys are the manifest's own form (slabs.fields, at parse): a `manifest` problem
    check = "manifest" if edit in AT_PARSE else "manifest_declared"
    assert not r.ok and check in r.counts, (r.counts, r.problems)


AT_PARSE = {"nan_count_of_int_column", "values_column_dropped"}


def test_skipped_rows_against_the_source_recount(tmp_path):
    """Under on_empty skip any count is possible by the form; --source recounts the rows the
    source's tokenizing skips."""
    import json

    from conftest import GPT2
    inp = tmp_path / "in.jsonl"
    rows = [{"text": f"row {i} " * (i + 3)} for i in range(20)] + [{"text": ""}]
    inp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = TokenizeConfig(tokenizer=GPT2, on_empty="skip")
    out = str(tmp_path / "packed")
    pack([str(inp)], Alignment(capacity=512), PackingConfig("bfd"), cfg, output=out,
         cache_dir=str(tmp_path / "cache"))
    src, _ = source_store([str(inp)], cfg, cache_dir=str(tmp_path / "srccache"))
    assert read_manifest(out)["stats"]["skipped_rows"]["empty"] == 1
    assert verify(out, source_dir=src, workers=1).ok
    man = read_manifest(out)
    man["stats"]["skipped_rows"]["empty"] = man["stats"]["changes"]["rows_skipped_empty"] = 4
    save_manifest(out, man)
    assert verify(out, workers=1).ok  # consistent in itself: only the recount can tell
    r = verify(out, source_dir=src, workers=1)
    assert not r.ok and "manifest_declared" in r.counts, r.counts
    assert any("the source skips 1" in p.message for p in r.problems), r.problems
