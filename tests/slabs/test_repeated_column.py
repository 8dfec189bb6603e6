"""S46B-6: a shard holding a column twice (a recomputed `lp` appended under its own name,
`input_ids` twice; Parquet allows it) was refused by verify, inspect and every reader as
"column 'lp' is missing", sending the user to look for a column `pq.read_schema` shows twice.
Now every reader of a shard's footer says what it is (slabs.schema.repeated_column, asked by
slabs.check and verify): the column, how many times it appears, the fix; one line, packtool's
own error."""
from __future__ import annotations

import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from side_support import side_output  # noqa: F401  (the fixture)
from slab_support import resign

from packtool.errors import PacktoolError

pytest.importorskip("torch")
from typer.testing import CliRunner  # noqa: E402

SHARD0 = "slabs-00000.parquet"
# a list column, a scalar one, a side column of values, a support (K-wide) side column
COLUMNS = ["input_ids", "num_tokens", "lp", "sup"]


def _cli(args, rc):
    from packtool.cli.app import app
    r = CliRunner().invoke(app, args)
    assert r.exit_code == rc and "Traceback" not in r.output, r.output
    return r.output


def _verify(out, tmp):
    return _cli(["verify", out], 1)


def _inspect(out, tmp):
    return [ln for ln in _cli(["inspect", out], 2).splitlines() if ln.startswith("error:")][0]


def _refused(fn):
    def run(out, tmp):
        with pytest.raises(PacktoolError) as e:
            fn(out, tmp)
        return str(e.value)
    return run


def _hf(out, tmp):
    from packtool.hf import SlabDataset
    ds = SlabDataset(out)
    return ds[len(ds) - 1]


def _hf_arrow(out, tmp):
    from packtool.hf import SlabDataset
    pytest.importorskip("datasets")
    return SlabDataset(out).to_hf(cache_dir=os.path.join(tmp, "hf"))


def _megatron(out, tmp):
    from packtool.megatron.dataset import PackedSlabDataset
    return PackedSlabDataset(out, grad_accum=1, micro_batch_tokens=1024)


def _reader(out, tmp):
    from packtool.slabs.format import SlabManifest
    from packtool.slabs.reader import SlabIndex, SlabReader
    m = SlabManifest.read(out)
    r = SlabReader(m, SlabIndex.build(m))
    return r.row(0)


def _standalone(out, tmp):
    """FORMAT.md's standalone reader: its one ValueError naming the shard, not pyarrow's KeyError."""
    from slab_support import format_reader
    mod = format_reader()
    with pytest.raises(ValueError) as e:
        mod.open_output(out)
    return str(e.value)


CONSUMERS = {"standalone-reader": _standalone, "verify": _verify, "inspect": _inspect, "hf": _refused(_hf), "hf-to_hf": _refused(_hf_arrow),
             "megatron-dataset": _refused(_megatron), "slab-reader": _refused(_reader)}


def _twice(src, tmp, col):
    out = os.path.join(tmp, "out")
    shutil.copytree(src, out)
    p = os.path.join(out, SHARD0)
    t = pq.read_table(p)
    f = t.schema.field(col)
    pq.write_table(t.append_column(f, pa.array(t.column(col).to_pylist(), f.type)), p)
    assert pq.read_schema(p).names.count(col) == 2
    resign(out, SHARD0)
    return out


@pytest.mark.parametrize("consumer", CONSUMERS)
@pytest.mark.parametrize("col", COLUMNS)
def test_a_column_twice_in_a_shard_is_said_as_such(side_output, tmp_path, col, consumer):  # noqa: F811
    out = _twice(side_output, str(tmp_path), col)
    said = CONSUMERS[consumer](out, str(tmp_path))
    line = next(ln for ln in said.splitlines() if "appears" in ln) if consumer == "verify" else said
    assert f"column {col!r} appears 2 times in the shard" in line and SHARD0 in line, said
    assert f"{col!r} is missing" not in said and "missing from the shard" not in said, said
    assert "KeyError" not in said and "exists 2 times" not in said and "Multiple matches" not in said, said
    if consumer != "verify":
        assert "\n" not in said, said
