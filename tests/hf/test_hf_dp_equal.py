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


@pytest.mark.parametrize("batch", [1, 2, 3])
@pytest.mark.parametrize("world", [2, 4])
def test_the_interleaved_dataset_hands_every_rank_its_own_equal_stream(outs, world, batch):
    """What accelerate gives rank r of `SlabDataset(world_size=N)` is rank r's own stream, up
    to its last whole run of `batch` slabs (all of it with batch 1: no slab of another rank
    from accelerate's wrap-around), the same number of batches on every rank."""
    from accelerate.data_loader import BatchSamplerShard
    from torch.utils.data import BatchSampler, SequentialSampler
    (paths, _) = outs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        every = SlabDataset(paths["round robin"], world_size=world, per_device_batch=batch)
        mine = [SlabDataset(paths["round robin"], rank=r, world_size=world) for r in range(world)]
    got = [[int(every.order[i]) for b in BatchSamplerShard(BatchSampler(SequentialSampler(every), batch, False),
                                                            world, r) for i in b]
           for r in range(world)]
    assert len({len(g) for g in got}) == 1 and len({len(m) for m in mine}) == 1
    whole = len(mine[0]) // batch * batch
    for r in range(world):
        assert got[r][:whole] == mine[r].order[:whole].tolist() and (batch > 1 or whole == len(got[r]))


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
