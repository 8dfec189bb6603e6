"""S32-19/S32-21: packtool.hf.SlabDataset and packtool.megatron.PackedSlabDataset check every
integer argument at the call (packtool/params.py: numpy integers are integers, a bool or float
is not, ranges), one PacktoolConfigError naming the argument, before any work."""
from __future__ import annotations

import numpy as np
import pytest
from slab_support import write_pack

from packtool.align import Alignment
from packtool.errors import PacktoolConfigError, PacktoolError
from packtool.planning.core import PackingConfig

pytest.importorskip("torch")

ARGS = {"hf": ("rank", "world_size", "per_device_batch", "row_group_cache"),
        "megatron": ("dp_rank", "dp_size", "cp_rank", "cp_size", "seed", "grad_accum", "micro_batch_tokens",
                     "row_group_cache")}
BAD = (True, 1.5, -1, "2")
CASES = [(e, a, v) for e, args in ARGS.items() for a in args for v in BAD]


def _make(entry):
    if entry == "hf":
        from packtool.hf import SlabDataset
        return SlabDataset
    from packtool.megatron.dataset import PackedSlabDataset
    return PackedSlabDataset


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return write_pack(str(tmp_path_factory.mktemp("args")), [40, 70, 90, 120, 30], Alignment(capacity=256))[0]


@pytest.mark.parametrize("entry,name,value", CASES)
def test_a_dataset_refuses_a_bad_argument_at_the_call(out, entry, name, value):
    with pytest.raises(PacktoolConfigError) as e:
        _make(entry)(out, **{name: value})
    assert str(e.value).startswith(name) and "\n" not in str(e.value), str(e.value)


@pytest.mark.parametrize("entry", list(ARGS))
def test_numpy_integers_are_integers(out, entry):
    args = {"hf": dict(world_size=np.int64(1), per_device_batch=np.int32(2)),
            "megatron": dict(seed=np.int64(3), grad_accum=np.int32(2))}[entry]
    _make(entry)(out, **args)


def test_a_dp_output_read_by_fewer_ranks_names_world_size(tmp_path):
    from packtool.hf import SlabDataset
    dp_out, _ = write_pack(str(tmp_path), [40, 70, 90, 120, 30, 60], Alignment(capacity=256),
                           PackingConfig("bfd", dp=2))
    with pytest.raises(PacktoolError) as e:
        SlabDataset(dp_out)
    assert "world_size=2" in str(e.value) and "re-pack with dp=1 (`packtool pack --dp 1`), or with dp=1" \
        not in str(e.value), str(e.value)
    assert len(SlabDataset(dp_out, world_size=2, rank=1)) > 0
