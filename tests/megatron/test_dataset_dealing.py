"""Round-robin dealing of PackedSlabDataset (and so `packtool train`) says what it cannot give as
asked: --grad-accum above a rank's slabs (S41-4); more DP ranks than slabs refused and ranks dealt a
slab fewer named, as packtool.hf does (S41-7). Each note is the job's, said once by rank 0 (every
rank said it: N lines for N ranks), in one process dealing every rank and in spawned gloo ranks."""
from __future__ import annotations

import json

import pytest

from packtool.errors import PacktoolConfigError

pytest.importorskip("megatron.core")

from megatron_runs import TINY, run_cli, small_slabs  # noqa: E402
from spawned_ranks import join_gloo, spawn_ranks  # noqa: E402

import packtool.notes as N  # noqa: E402
from packtool.megatron.dataset import PackedSlabDataset  # noqa: E402


@pytest.fixture(scope="module")
def slabs(tmp_path_factory):
    path = small_slabs(tmp_path_factory.mktemp("deal") / "d")
    return path, len(PackedSlabDataset(path).index)


def _notes(fn):
    start = N.mark()
    fn()
    return N.since(start)


@pytest.mark.parametrize("dp_size, over", [(1, 0), (1, 1), (1, 1000), (2, 1), (2, 7)])
def test_grad_accum_above_a_ranks_slabs_is_said(slabs, dp_size, over):
    path, n = slabs
    per_rank = -(-n // dp_size)
    ga = per_rank + over
    said = _notes(lambda: [PackedSlabDataset(path, dp_rank=r, dp_size=dp_size, grad_accum=ga) for r in range(dp_size)])
    said = [s for s in said if "grad_accum" in s]
    if not over:
        assert said == []
        return
    assert len(said) == 1 and f"grad_accum={ga} is above the {per_rank} slab(s)" in said[0], said  # not per rank
    assert f"each step takes {per_rank}" in said[0] and f"at most {per_rank}" in said[0]
    ds = PackedSlabDataset(path, dp_size=dp_size, grad_accum=ga)
    assert ds.steps_per_epoch() == 1  # what the note says: one epoch per step


def test_train_grad_accum_above_the_slabs_notes_the_flag(slabs):
    path, n = slabs
    r = run_cli(["train", path, *TINY, "--steps", "1", "--grad-accum", "1000", "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    line = f"--grad-accum 1000 is above the {n} slab(s) of {path} per data-parallel rank"
    assert got["last_step"]["micro_batches"] == n and any(line in x for x in got["notes"]), got["notes"]
    assert line in r.stderr


@pytest.mark.parametrize("extra", [1, 2, 88])
@pytest.mark.parametrize("rank", ["first", "last"])
def test_more_dp_ranks_than_slabs_is_refused(slabs, extra, rank):
    path, n = slabs
    dp = n + extra
    with pytest.raises(PacktoolConfigError) as e:
        PackedSlabDataset(path, dp_rank=0 if rank == "first" else dp - 1, dp_size=dp)
    msg = str(e.value)
    assert "\n" not in msg and f"dp_size={dp} but {path} holds {n} slabs: {extra} rank(s) would get none" in msg
    assert f"run at most {n} data-parallel ranks" in msg and f"packtool pack --dp {dp}" in msg


@pytest.mark.parametrize("dp", [2, 3, "n"])
def test_ranks_dealt_a_slab_fewer_are_named_once_for_the_job(slabs, dp):
    path, n = slabs
    dp = n if dp == "n" else dp
    said = _notes(lambda: [PackedSlabDataset(path, dp_rank=r, dp_size=dp) for r in range(dp)])
    said = [s for s in said if "do not divide" in s]
    if n % dp == 0:
        assert said == []
        return
    assert len(said) == 1 and f"{n} slabs do not divide among dp_size={dp} ranks: rank(s) {n % dp}" in said[0], said
    assert f"packtool pack --dp {dp}" in said[0]
    steps = list(PackedSlabDataset(path, dp_rank=dp - 1, dp_size=dp).steps(max_steps=2 * -(-n // dp)))
    assert sum(all(mb is None for mb in s.micro_batches) for s in steps) == 2  # its last step of each epoch


def _rank(rank, init, path, dp_size, out):
    """A spawned rank: joins the gloo group, builds its dataset (dp_size 1: two tensor-parallel
    peers of DP rank 0), writes the notes it said."""
    join_gloo(rank, 2, init)
    start = N.mark()
    PackedSlabDataset(path, dp_rank=rank % dp_size, dp_size=dp_size, grad_accum=1000)
    with open(f"{out}.{rank}", "w") as f:
        json.dump(N.since(start), f)


@pytest.mark.parametrize("dp_size", [2, 1], ids=["2 DP ranks", "2 TP peers of one DP rank"])
def test_spawned_ranks_say_the_jobs_notes_once(slabs, tmp_path, dp_size):
    path, n = slabs
    out = str(tmp_path / "notes")
    assert spawn_ranks(_rank, 2, (str(tmp_path / "init"), path, dp_size, out)) == [0, 0]
    said = [json.load(open(f"{out}.{r}")) for r in range(2)]
    assert said[1] == [], said  # rank 1 says none of them
    assert [s for s in said[0] if "grad_accum=1000 is above" in s], said
    assert len(said[0]) == (2 if n % dp_size else 1), said  # with the uneven dealing's own, once
