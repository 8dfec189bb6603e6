"""S46B-1: a shard entry's `max_token_id` (FORMAT.md: the largest token id in that shard, pads
included) edited *up* passed verify: verify held the ids only below it, and `packtool train`
then refused the output, advising a `--vocab-size` above the made-up figure. verify now holds
every shard's record to the largest id it reads (`shard_counts`, naming the shard, both figures
and the fix); a record edited *down* stays one `token_id_range` problem per slab (every reader
refuses that row group), not said twice. Over every kind of output (ids without a tokenizer;
a tokenizer's vocabulary above the edit), every shard, every way verify is run."""
from __future__ import annotations

import json
import os
import shutil

import pyarrow as pa
import pytest
from slab_support import write_pack
from typer.testing import CliRunner

from packtool.align import Alignment
from packtool.cli.app import app
from packtool.slabs.names import MANIFEST
from packtool.verification.run import verify

ROWS = [list(range(1 + k, 40 + k)) for k in range(0, 600, 7)] + [[5, 900, 7, 8]]


def _ids_only(root):
    import packtool
    out = os.path.join(root, "packed")
    packtool.pack(pa.table({"input_ids": ROWS}), alignment=Alignment(capacity=128), output=out,
                  cache_dir=os.path.join(root, "cache"), shard_tokens=1024)
    return out


def _tokenized(root):  # a synthetic tokenizer of vocabulary 1000, ids below it
    return write_pack(root, [40, 70, 90, 30, 100, 20, 60, 50, 80], Alignment(capacity=128), shard_tokens=200,
                      group_tokens=128)[0]


KINDS = {"ids without a tokenizer": _ids_only, "a tokenizer's vocabulary": _tokenized}


@pytest.fixture(scope="module", params=list(KINDS))
def output(request, tmp_path_factory):
    out = KINDS[request.param](str(tmp_path_factory.mktemp("maxid")))
    m = json.load(open(os.path.join(out, MANIFEST)))
    assert len(m["shards"]) >= 2 and all("max_token_id" in s for s in m["shards"])
    return out, request.param


def _edited(out, tmp_path, shard, to):
    """A copy of `out` whose shard `shard` records max_token_id `to(truth, vocab_size)`:
    (copy, shard file, its largest id, the record)."""
    dst = str(tmp_path / "copy")
    shutil.copytree(out, dst)
    path = os.path.join(dst, MANIFEST)
    m = json.load(open(path))
    e = m["shards"][shard % len(m["shards"])]
    truth = e["max_token_id"]
    e["max_token_id"] = to(truth, (m.get("tokenizer") or {}).get("vocab_size"))
    json.dump(m, open(path, "w"))
    return dst, e["file"], truth, e["max_token_id"]


# a record above the truth: by one, or far (the last id of the vocabulary where the manifest
# has one: at or over it the manifest check refuses it first, tests/megatron/test_max_token_id.py)
UP = {"up by 1": lambda t, v: t + 1, "far up": lambda t, v: (v - 1) if v else 299999}


def _cli(out, workers):
    r = CliRunner().invoke(app, ["verify", out, "--workers", str(workers), "--json"])
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    rep = json.loads(r.output)
    return rep["counts"], [p["message"] for p in rep["problems"]]


def _library(out, workers, batch_rows=128):
    r = verify(out, workers=workers, batch_rows=batch_rows)
    assert not r.ok
    return dict(r.counts), [p.message for p in r.problems]


# every way verify runs: the library, in this process or over a pool, in small batches; the CLI
WAYS = {"library, 1 worker": lambda o: _library(o, 1), "library, 2 workers": lambda o: _library(o, 2),
        "library, batches of 2 rows": lambda o: _library(o, 1, batch_rows=2), "CLI": lambda o: _cli(o, 1)}


@pytest.mark.parametrize("way", list(WAYS))
@pytest.mark.parametrize("up", list(UP))
@pytest.mark.parametrize("shard", [0, -1], ids=["first shard", "last shard"])
def test_a_max_token_id_above_the_shards_largest_id_fails_verify(output, tmp_path, way, up, shard):
    edited, name, truth, recorded = _edited(output[0], tmp_path, shard, UP[up])
    counts, messages = WAYS[way](edited)
    assert counts == {"shard_counts": 1}, (counts, messages)
    (msg,) = messages
    assert "\n" not in msg and name in msg and f"max_token_id {recorded}" in msg and f"largest token id is {truth}" \
        in msg and "re-run `packtool pack`" in msg, msg


@pytest.mark.parametrize("shard", [0, -1], ids=["first shard", "last shard"])
def test_a_max_token_id_below_it_is_one_problem_per_slab_not_two(output, tmp_path, shard):
    edited, name, truth, recorded = _edited(output[0], tmp_path, shard, lambda t, v: t - 1)
    counts, messages = _library(edited, 1)
    assert set(counts) == {"token_id_range"}, (counts, messages)
    assert all(f"recorded largest id {recorded}" in m for m in messages), messages


def test_an_untouched_output_passes(output):
    r = verify(output[0], workers=1)
    assert r.ok, r.problems
