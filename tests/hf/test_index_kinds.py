"""S33-8: every public index entry of the slab datasets (packtool.hf.SlabDataset's [i], slices and
iteration, dp_order's rank; packtool.megatron.PackedSlabDataset's load/plan/steps; S35: the
standalone packtool.slabs.SlabReader's row(i), which the datasets read through) checks what
it is given (params.position / checked): an integer (numpy's too; a bool or float is not one),
negative from the end as Python's sequences count, out of range a PacktoolIndexError; a wrong
kind one PacktoolInputError naming the argument, never numpy's or Python's own words. A slice
of a SlabDataset is what `datasets.Dataset` gives for one: a dict of lists."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from slab_support import write_pack  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.errors import PacktoolIndexError, PacktoolInputError  # noqa: E402
from packtool.hf import SlabDataset, dp_order  # noqa: E402


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    path, _ = write_pack(str(tmp_path_factory.mktemp("idx")), np.arange(20, 40), Alignment(capacity=64))
    return path


def _reader(out):
    from packtool.slabs import SlabIndex, SlabManifest, SlabReader
    sm = SlabManifest.read(out)
    return SlabReader(sm, SlabIndex.build(sm))


def _mega(out):
    from packtool.megatron.dataset import PackedSlabDataset
    return PackedSlabDataset(out)


# entry -> (call with an index, the argument its error names)
ENTRIES = {
    "SlabDataset[i]": (lambda out, i: SlabDataset(out)[i], "i"),
    "SlabReader.row(i)": (lambda out, i: _reader(out).row(i), "i"),
    "dp_order(rank=)": (lambda out, i: dp_order(SlabDataset(out).index, 1, 2, rank=i), "rank"),
    "PackedSlabDataset.load([i])": (lambda out, i: _mega(out).load([i]), "mb"),
    "PackedSlabDataset.plan(epoch)": (lambda out, i: _mega(out).plan(i), "epoch"),
    "PackedSlabDataset.steps(start_step)": (lambda out, i: next(_mega(out).steps(start_step=i)), "start_step"),
    "PackedSlabDataset.steps(max_steps)": (lambda out, i: next(_mega(out).steps(max_steps=i), None), "max_steps"),
}
WRONG_KINDS = {"float": 1.0, "bool": True, "numpy bool": np.bool_(True), "str": "1", "None": None,
               "list": [1], "numpy float": np.float64(1.0)}


@pytest.mark.parametrize("kind", list(WRONG_KINDS))
@pytest.mark.parametrize("entry", list(ENTRIES))
def test_a_wrong_kind_of_index_is_one_packtool_error_naming_it(out, entry, kind):
    call, name = ENTRIES[entry]
    value = WRONG_KINDS[kind]
    if value is None and name in ("max_steps", "rank"):
        pytest.skip("None is documented there: no step budget; every rank's slabs")
    with pytest.raises(PacktoolInputError) as e:
        call(out, value)
    assert str(e.value).count("\n") == 0 and name in str(e.value), e.value


@pytest.mark.parametrize("entry", ["SlabDataset[i]", "SlabReader.row(i)", "PackedSlabDataset.load([i])"])
def test_slab_positions_count_as_python_does(out, entry):
    call, name = ENTRIES[entry]
    n = len(SlabDataset(out).index)
    for good in (0, n - 1, -1, -n, np.int64(1), np.int32(-2)):
        call(out, good)
    for bad in (n, -n - 1, 10**30):
        with pytest.raises(PacktoolIndexError, match=f"slab {bad} out of range: there are {n} slabs"):
            call(out, bad)


@pytest.mark.parametrize("mb", [3, np.int64(3), 1.5, "01", b"01", {0: 1}, None])
def test_a_micro_batch_that_is_no_list_of_slabs_is_one_error_naming_mb(out, mb):
    """load(mb) takes a plan's micro-batch, slab numbers; a bare index was Python's "'int' object is
    not iterable" (a str, its characters read as slabs)."""
    with pytest.raises(PacktoolInputError) as e:
        _mega(out).load(mb)
    assert "mb must be a list of slab indices" in str(e.value) and "\n" not in str(e.value), e.value


def test_a_micro_batch_may_be_a_numpy_array(out):
    ds = _mega(out)
    a, b = ds.load(np.array([0, 1])), ds.load([0, 1])
    assert np.array_equal(a.input_ids, b.input_ids) and ds.load(np.zeros(0, np.int64)) is None


def test_negative_and_numpy_indices_are_the_same_slab(out):
    ds = SlabDataset(out)
    for a, b in ((-1, len(ds) - 1), (np.int64(2), 2), (np.uint8(1), 1)):
        assert all(np.array_equal(ds[a][k], ds[b][k]) for k in ds[b])


def test_iteration_ends_at_the_last_slab(out):
    ds = SlabDataset(out)
    assert sum(1 for _ in ds) == len(ds) > 2


@pytest.mark.parametrize("s", [slice(1, 3), slice(None, None, 2), slice(-2, None), slice(5, 1), slice(None, 10**9)])
def test_a_slice_is_a_dict_of_lists_as_datasets_gives(out, s):
    ds = SlabDataset(out)
    got = ds[s]
    rows = list(range(len(ds)))[s]
    assert set(got) == {"input_ids", "loss_mask", "seq_lens", "cu_seqlens_padded"}
    for k, values in got.items():
        assert len(values) == len(rows) and all(np.array_equal(v, ds[r][k]) for v, r in zip(values, rows))


@pytest.mark.parametrize("s", [slice(1.0, 3), slice(None, None, 0), slice("a", None)])
def test_a_bad_slice_is_one_packtool_error(out, s):
    with pytest.raises(PacktoolInputError, match=r"SlabDataset\[.*a slice takes integers"):
        SlabDataset(out)[s]
