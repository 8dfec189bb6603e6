"""FORMAT.md is executable: its standalone reader runs against a real pack and agrees with
packtool's own layout, and its manifest example has the shape of a real manifest."""
from __future__ import annotations

import json
import os
import re

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import GPT2, GSM8K, PEPS
from slab_support import format_reader

from packtool.align import Alignment
from packtool.layout import cp_rank_index
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.slabs.format import read_manifest
from packtool.tokenize.config import TokenizeConfig

FORMAT_MD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "FORMAT.md")


def _block(heading: str, lang: str) -> str:
    text = open(FORMAT_MD).read()
    section = text[text.index(heading):]
    m = re.search(rf"```{lang}\n(.*?)```", section, re.S)
    assert m, f"FORMAT.md: no ```{lang} block under {heading!r}"
    return m.group(1)


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    root = tmp_path_factory.mktemp("fmt")
    out = str(root / "packed")
    pack([GSM8K, PEPS], Alignment(tp=2, cp=2, capacity=2048), PackingConfig("bfd", overflow="split", seed=3),
         TokenizeConfig(tokenizer=GPT2, prompt_field="question", response_field="answer"),
         output=out, cache_dir=str(root / "cache"), shard_tokens=1 << 16)
    return out


def _same_keys(doc, real, where="manifest"):
    if isinstance(real, dict):
        assert isinstance(doc, dict), f"{where}: FORMAT.md shows {type(doc).__name__}, a manifest has an object"
        if where in ("manifest.stats.side_nan", "manifest.stats.side_inf"):  # per float side column: the
            return  # example has one, the packed fixture none
        if where in ("manifest.input.tokenize",):  # the options are elided with "..."
            assert set(doc) - {"..."} <= set(real), (where, set(doc) - set(real))
            return
        assert set(doc) == set(real), (where, sorted(set(doc) ^ set(real)))
        for k in doc:
            _same_keys(doc[k], real[k], f"{where}.{k}")
    elif isinstance(real, list) and real:
        assert isinstance(doc, list) and doc, f"{where}: FORMAT.md shows {doc!r}"
        _same_keys(doc[0], real[0], f"{where}[0]")


def test_the_manifest_example_has_the_shape_of_a_real_manifest(packed):
    doc = json.loads(_block("## .manifest.json", "json"))
    _same_keys(doc, read_manifest(packed))


def test_the_manifest_examples_alignment_is_what_packtool_derives():
    """The example's s, t and usable follow from its flags under its convention (it once showed
    skyrl's t under the packtool convention)."""
    from packtool.slabs.format import alignment_dict
    shown = json.loads(_block("## .manifest.json", "json"))["config"]["alignment"]
    flags = {k: shown[k] for k in ("tp", "cp", "sp", "fp8", "capacity", "fixed_length", "convention")}
    assert shown == alignment_dict(Alignment(**flags))


def test_the_standalone_reader_matches_packtool(packed):
    mod = format_reader()
    man = mod.open_output(packed)
    cp = man["config"]["alignment"]["cp"]
    checked = 0
    for entry in man["shards"]:
        t = pq.read_table(os.path.join(packed, entry["file"]))
        for row in range(t.num_rows):
            slab = t.slice(row, 1).to_pylist()[0]
            ids = np.asarray(slab["input_ids"], np.int32)
            mask = np.asarray(slab["loss_mask"], np.uint8)
            cu = np.asarray(slab["cu_seqlens_padded"], np.int64)
            for r in range(cp):
                got_ids, got_mask, got_cu, side = mod.read_slab_for_cp_rank(packed, entry["file"], row, r, man)
                idx = cp_rank_index(cu[:-1], np.diff(cu), cp, r)
                assert np.array_equal(got_ids, ids[idx]) and np.array_equal(got_mask, mask[idx])
                assert np.array_equal(got_cu, cu // cp) and side == {}
                checked += 1
    assert checked >= 2 * cp


def test_the_standalone_readers_multiples_are_packtools():
    """S45B-1: the reader holds a manifest's s and t to what its tp, cp, sp, fp8 and convention give, in
    its own transcription of align.py's rules: the two agree on every convention, recipe and size."""
    import itertools
    from packtool.align import CONVENTIONS, FP8_RECIPES
    mod = format_reader()
    for conv, fp8, tp, cp, sp in itertools.product(CONVENTIONS, FP8_RECIPES, (1, 2, 3, 4, 8), (1, 2, 3, 4, 8),
                                                   (False, True)):
        a = Alignment(tp=tp, cp=cp, sp=sp, fp8=fp8, convention=conv, capacity=1 << 20)
        assert mod._multiples(tp, cp, sp, fp8, conv) == (a.s, a.t), a.describe()


# every argument a caller gives the reader, each outside what the output holds (S36-16): a rank
# past cp sliced another rank's chunks without a word, a row past the shard or a rank below 0 was
# a bare IndexError, a shard the manifest does not list a StopIteration
BAD_ARGUMENTS = {"rank cp": ("shard", 0, "cp", r"r=2 is not a CP rank of cp=2 \(0\.\.1\)"),
                 "rank -1": ("shard", 0, -1, r"r=-1 is not a CP rank of cp=2"),
                 "rank True": ("shard", 0, True, r"r=True is not a CP rank"),
                 "row past the shard": ("shard", "rows", 0, r"row \d+: the shard has \d+ rows \(rows count from 0\)"),
                 "row -1": ("shard", -1, 0, r"row -1: the shard has \d+ rows"),
                 "row 1.0": ("shard", 1.0, 0, r"row 1\.0: the shard has \d+ rows"),
                 "unlisted shard": ("slabs-99999.parquet", 0, 0, r"'slabs-99999\.parquet' is not one of its shards")}


@pytest.mark.parametrize("case", BAD_ARGUMENTS)
def test_the_standalone_reader_refuses_arguments_outside_the_output(packed, case):
    mod = format_reader()
    man = mod.open_output(packed)
    shard, row, r, message = BAD_ARGUMENTS[case]
    entry = man["shards"][0]
    shard = entry["file"] if shard == "shard" else shard
    row = entry["rows"] if row == "rows" else row
    r = man["config"]["alignment"]["cp"] if r == "cp" else r
    with pytest.raises(ValueError, match=message):
        mod.read_slab_for_cp_rank(packed, shard, row, r, man)
    last = (entry["rows"] - 1, man["config"]["alignment"]["cp"] - 1)  # the edges themselves are read
    assert len(mod.read_slab_for_cp_rank(packed, entry["file"], np.int64(last[0]), last[1], man)[0])


@pytest.mark.parametrize("argv", [[], ["x", "s", "0"], ["x", "s", "one", "0"], ["x", "s", "0", "²"]])
def test_the_standalone_readers_command_line_says_its_usage(argv, monkeypatch):
    import sys
    monkeypatch.setattr(sys, "argv", ["reader.py", *argv])
    with pytest.raises(SystemExit, match=r"^usage: reader\.py OUT_DIR SHARD ROW CP_RANK"):
        format_reader("__main__")


def test_every_test_reads_format_mds_reader_through_slab_support():
    """One extraction of FORMAT.md's standalone reader (slab_support.format_reader_code): a copy of
    it in a test file would go on reading the reader its own way when FORMAT.md's section moves."""
    tests = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    copies = []
    for root, _, files in os.walk(tests):
        for n in files:
            p = os.path.join(root, n)
            if n.endswith(".py") and n != "slab_support.py" and "## A standalone" + " reader" in open(p).read():
                copies.append(os.path.relpath(p, tests))
    assert copies == [], f"extract FORMAT.md's reader through slab_support.format_reader / run_format_reader: {copies}"


def test_the_standalone_readers_column_types_are_the_formats():
    """S48B-3: the reader holds each core column to its type as packtool's own readers do."""
    from packtool.slabs.schema import SCHEMA
    assert format_reader().COLUMNS == {f.name: f.type for f in SCHEMA}
