"""S35-14: packtool.hf.SlabDataset gives every rank of a data-parallel run the same number of
slabs, as packtool.megatron.PackedSlabDataset gives every rank the same steps (a DDP rank that
runs out leaves the others waiting in the all-reduce). Where the slabs do not divide among the
ranks, a short rank takes its own first slab(s) again, with one warning naming world_size, the
ranks and the fix (`pack --dp N`); a rank that would get no slab is refused in one line. The
interleaved dataset a Trainer shards through accelerate hands every rank the same stream."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("torch")

from slab_support import write_pack  # noqa: E402

from packtool import notes  # noqa: E402
from packtool.align import Alignment  # noqa: E402
from packtool.errors import PacktoolInputError  # noqa: E402
from packtool.hf import SlabDataset  # noqa: E402
from packtool.planning.core import PackingConfig  # noqa: E402


@pytest.fixture(scope="module")
def outs(tmp_path_factory):
    rr, _ = write_pack(str(tmp_path_factory.mktemp("rr")), np.arange(20, 61), Alignment(capacity=64))
    dp, _ = write_pack(str(tmp_path_factory.mktemp("dp")), np.arange(20, 61), Alignment(capacity=64),
                       PackingConfig(dp=3))
    n = len(SlabDataset(rr))
    assert n % 2 and n % 3 and n > 8, n  # the cases below need a count no small world divides
    return {"round robin": rr, "--dp 3": dp}, n


def _mine(out, world, rank):
    start = notes.mark()
    ds = SlabDataset(out, rank=rank, world_size=world)
    return ds, notes.since(start)


# (output, world_size as a function of the slab count n)
CASES = [("round robin", lambda n: 1), ("round robin", lambda n: 2), ("round robin", lambda n: 3),
         ("round robin", lambda n: 4), ("round robin", lambda n: n - 1), ("round robin", lambda n: n),
         ("--dp 3", lambda n: 3)]


@pytest.mark.parametrize("kind,world", CASES, ids=[f"{k}-{i}" for i, (k, _) in enumerate(CASES)])
def test_every_rank_takes_the_same_number_of_slabs(outs, kind, world):
    paths, n = outs
    out, world = paths[kind], world(n)
    got = [_mine(out, world, r) for r in range(world)]
    every = len(got[0][0].index)
    lengths = {len(ds) for ds, _ in got}
    assert lengths == {-(-every // world)}, lengths  # equal: nobody leaves the others in the all-reduce
    orders = [ds.order for ds, _ in got]
    assert sorted(set(np.concatenate(orders).tolist())) == list(range(every))  # every slab, on its own rank
    repeats = sum(o.size - np.unique(o).size for o in orders)
    assert repeats == -every % world
    for ds, said in got:
        own = np.unique(ds.order).size
        assert ds.order[own:].tolist() == ds.order[:ds.order.size - own].tolist()  # its own first slabs again
    said = [s for _, got_said in got for s in got_said]  # the job's note, by rank 0 alone (not per rank)
    if repeats:
        assert len(said) == 1 and got[0][1] == said and f"world_size={world}" in said[0] and \
            f"--dp {world}" in said[0] and f"({repeats} in all" in said[0] and "\n" not in said[0], said
    else:
        assert said == []


# (output, world_size as a function of the slab count n): a --dp N output runs N ranks
WORLDS = [("round robin", lambda n: 2), ("round robin", lambda n: 4), ("--dp 3", lambda n: 3)]


@pytest.mark.parametrize("batch", [1, 2, 3, 5])
@pytest.mark.parametrize("kind,world", WORLDS, ids=[f"{k}-{i}" for i, (k, _) in enumerate(WORLDS)])
def test_the_interleaved_dataset_hands_every_rank_its_own_equal_stream(outs, kind, world, batch):
    """S46B-7: what accelerate gives rank r of `SlabDataset(world_size=N, per_device_batch=B)` is
    rank r's own stream, whole: every batch one rank's slabs, never another rank's (its last
    batch, and its wrap-around, took them where B did not divide a rank's slabs), the same
    number on every rank; `SlabDataset(rank=r, world_size=N, per_device_batch=B)` is that
    stream. A rank whose slabs B does not divide takes its own first slab(s) again, and the
    note counts every repeat."""
    from accelerate.data_loader import BatchSamplerShard
    from torch.utils.data import BatchSampler, SequentialSampler
    paths, n = outs
    out, world = paths[kind], world(n)
    start = notes.mark()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        every = SlabDataset(out, world_size=world, per_device_batch=batch)
    said = notes.since(start)
    mine = [SlabDataset(out, rank=r, world_size=world, per_device_batch=batch) for r in range(world)]
    planned = [np.unique(SlabDataset(out, rank=r, world_size=world).order) for r in range(world)]
    got = [[int(every.order[i]) for b in BatchSamplerShard(BatchSampler(SequentialSampler(every), batch, False),
                                                            world, r) for i in b]
           for r in range(world)]
    for r in range(world):
        assert got[r] == mine[r].order.tolist(), (r, got[r], mine[r].order.tolist())
        assert set(got[r]) == set(planned[r].tolist())  # its own slabs, every one of them
        own = planned[r].size
        assert got[r][own:] == (got[r][:own] * len(got[r]))[:len(got[r]) - own]  # its own first slabs again
    assert len({len(g) for g in got}) == 1 and len(got[0]) % batch == 0
    repeats = sum(len(g) - len(set(g)) for g in got)
    if repeats:
        assert len(said) == 1 and f"({repeats} in all" in said[0] and "\n" not in said[0], said
        if len(got[0]) > max(p.size for p in planned):  # the batch made the repeats, or some of them
            assert f"per_device_batch={batch}" in said[0], said
    else:
        assert said == []


# S47B-4 / review R-8: one process has no other rank whose slabs a short last batch could take
# (accelerate does not shard its sampler) and no all-reduce to wait in: its stream is every slab
# once, whatever per_device_batch, and nothing is said
@pytest.mark.parametrize("rank", [None, 0])
@pytest.mark.parametrize("batch", [2, 3, 5])
def test_one_process_takes_every_slab_once_whatever_the_batch(outs, batch, rank):
    paths, n = outs
    start = notes.mark()
    ds = SlabDataset(paths["round robin"], rank=rank, world_size=1, per_device_batch=batch)
    assert ds.order.tolist() == list(range(n)) and notes.since(start) == []


@pytest.mark.parametrize("extra", [1, 5, 2**31 - 100])
def test_a_rank_that_would_get_no_slab_is_refused(outs, extra):
    paths, n = outs
    with pytest.raises(PacktoolInputError) as e:
        SlabDataset(paths["round robin"], rank=0, world_size=n + extra)
    msg = str(e.value)
    assert f"world_size={n + extra}" in msg and f"holds {n} slabs" in msg and f"{extra} rank(s) would get none" \
        in msg and f"run at most {n} ranks" in msg and "\n" not in msg, msg
    with pytest.raises(PacktoolInputError):
        SlabDataset(paths["round robin"], world_size=n + extra)  # the Trainer's interleaved view too
