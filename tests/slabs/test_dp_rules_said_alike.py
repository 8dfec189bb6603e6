"""The DP fields' rules have one owner (slabs.open_rules.plan_breaks): a reader refusing an output and
verify rejecting it name the same slab (shard and row) for the same reason, in the same words, for
every rule of the kind (dp_rank in range, ranks even, each (step, dp_rank, microbatch) once,
microbatch >= 0, steps in on-disk order, slab_index a permutation; at dp=1 step == slab_index and
microbatch 0). Before, verify said each rule in words of its own, without the slab's place."""
from __future__ import annotations

import os
import re
import shutil

import numpy as np
import pytest
from slab_support import load_rows, save_rows, write_pack

from packtool.align import Alignment
from packtool.errors import PacktoolError
from packtool.planning.core import PackingConfig

pytest.importorskip("torch")
typer = pytest.importorskip("typer")
from typer.testing import CliRunner  # noqa: E402

LENGTHS = np.random.default_rng(5).integers(1, 30, 160) * 8 - 3
SHARD = "slabs-00001.parquet"  # the damage lies past the first shard: its row is not its slab number


def _set(col, row, value):
    def edit(c):
        c[col][row] = value(c) if callable(value) else value
    return edit


def _swap(col, a, b):
    def edit(c):
        c[col][a], c[col][b] = c[col][b], c[col][a]
    return edit


def _twice(c):
    r = next(r for r in range(1, len(c["step"])) if c["dp_rank"][r] == c["dp_rank"][0])
    c["step"][r], c["microbatch"][r] = c["step"][0], c["microbatch"][0]


def _steps_back(c):
    r = max(r for r in range(len(c["step"])) if c["dp_rank"][r] == c["dp_rank"][0] and c["step"][r] != c["step"][0])
    for col in ("step", "microbatch"):
        c[col][0], c[col][r] = c[col][r], c[col][0]


DAMAGES = {  # name -> (dp, edit of SHARD's rows)
    "dp_rank-outside": (2, _set("dp_rank", 2, 5)),
    "dp_rank-negative": (2, _set("dp_rank", 1, -1)),
    "ranks-unequal": (2, _set("dp_rank", 0, lambda c: 1 - c["dp_rank"][0])),
    "microbatch-twice": (2, _twice),
    "microbatch-negative": (2, _set("microbatch", 1, -7)),
    "steps-back": (2, _steps_back),
    "slab_index-repeated": (2, _set("slab_index", 0, lambda c: c["slab_index"][1])),
    "dp1:slab_index-outside": (1, _set("slab_index", 1, 10**6)),
    "dp1:dp_rank-1": (1, _set("dp_rank", 1, 1)),
    "dp1:step-huge": (1, _set("step", 1, 2**30)),
    "dp1:steps-swapped": (1, _swap("step", 0, 1)),
    "dp1:microbatch-one": (1, _set("microbatch", 2, 1)),
}


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("dp_said"))
    clean = {dp: write_pack(os.path.join(root, f"clean{dp}"), LENGTHS, Alignment(capacity=256),
                            PackingConfig("bfd", dp=dp), shard_tokens=8192, group_tokens=1 << 20)[0]
             for dp in (1, 2)}
    made = {}

    def get(name):
        if name not in made:
            dp, edit = DAMAGES[name]
            made[name] = os.path.join(root, re.sub(r"[^a-z0-9]+", "-", name))
            shutil.copytree(clean[dp], made[name])
            cols = load_rows(made[name], SHARD)
            edit(cols)
            save_rows(made[name], SHARD, cols)
        return made[name]
    return get


def _megatron(out, dp):
    from packtool.megatron.dataset import PackedSlabDataset
    PackedSlabDataset(out, dp_rank=0, dp_size=dp, grad_accum=4, micro_batch_tokens=1024)


def _hf(out, dp):
    from packtool.hf import SlabDataset
    SlabDataset(out, rank=0, world_size=dp)


def _inspect(out, dp):
    from packtool.cli.app import app
    r = CliRunner().invoke(app, ["inspect", out, "--json"])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    raise PacktoolError(r.output.strip())


@pytest.mark.parametrize("consumer", ["megatron-dataset", "hf", "inspect"])
@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_reader_and_verify_say_a_broken_dp_rule_alike(damaged, damage, consumer):
    from packtool.verification.run import verify
    out, dp = damaged(damage), DAMAGES[damage][0]
    said = [p for p in verify(out, workers=1).problems if p.check in ("dp", "slab_index")]
    assert said, f"verify passed {damage}"
    with pytest.raises(PacktoolError) as e:
        {"megatron-dataset": _megatron, "hf": _hf, "inspect": _inspect}[consumer](out, dp)
    first = said[0]
    assert first.shard is not None and first.row is not None, first
    where = f"{first.shard} row group 0 row {first.row}: {first.message};"
    assert where in str(e.value), f"verify: {where}\n{consumer}: {e.value}"
