"""S44-3 and L6 under the Ray engine: `--overflow truncate` counts the targets it cuts away and the
sequences it leaves with none, and `--overflow split` the targets it loses at its cuts, from the
tokenized rows, as the local engine does (tests/packing/test_truncate_targets.py,
test_split_targets.py), in both of its planning paths."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'packtool[ray]')")

from conftest import LOCAL_RAY_GROUP  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.engines.ray_engine import pack_ray  # noqa: E402
from packtool.planning.core import PackingConfig  # noqa: E402

pytestmark = [pytest.mark.usefixtures("local_ray"), LOCAL_RAY_GROUP]

IDS = [list(range(1, 21)), list(range(1, 6)), list(range(1, 31))]
MASK = [[0] * 15 + [1] * 5, [0, 1, 1, 1, 1], [1] * 10 + [0] * 20]


@pytest.mark.parametrize("plan_shard_rows", [0, 1])
def test_ray_counts_the_targets_truncate_cut(tmp_path, plan_shard_rows):
    src = str(tmp_path / "ov.parquet")
    pq.write_table(pa.table({"input_ids": pa.array(IDS, pa.list_(pa.int32())),
                             "loss_mask": pa.array(MASK, pa.list_(pa.int8()))}), src)
    res = pack_ray([src], Alignment(capacity=12), PackingConfig(overflow="truncate"), output=str(tmp_path / "o"),
                   cache_dir=str(tmp_path / "c"), plan_shard_rows=plan_shard_rows)
    o, ch = res.summary.overflow, res.summary.changes
    assert (o.targets_lost, o.untrained, ch.targets_lost, ch.sequences_untrained, res.loss_tokens) == (5, 1, 5, 1, 13)
    assert res.summary.first_untrained.endswith("ov.parquet row 0")


@pytest.mark.parametrize("plan_shard_rows", [0, 1])
def test_ray_counts_the_targets_split_lost_at_its_cuts(tmp_path, plan_shard_rows):
    """L6: the targets among the chunks' first tokens, not one per cut (tests/packing/test_split_targets.py)."""
    # the rows of tests/packing/test_split_targets.py: 7 cuts at U=8, 4 of them on a target
    SPLIT_IDS = [list(range(1, 21)), list(range(1, 6)), list(range(1, 31)), list(range(1, 18))]
    SPLIT_MASK = [[1] * 20, [0, 1, 1, 1, 1], [0] * 10 + [1] * 20, [0] + [1] * 7 + [0] + [1] * 7 + [0]]
    U, LOST = 8, 4
    SPLIT_KEPT = sum(sum(m[1:]) for m in SPLIT_MASK) - LOST
    src = str(tmp_path / "ov.parquet")
    pq.write_table(pa.table({"input_ids": pa.array(SPLIT_IDS, pa.list_(pa.int32())),
                             "loss_mask": pa.array(SPLIT_MASK, pa.list_(pa.int8()))}), src)
    res = pack_ray([src], Alignment(capacity=U), PackingConfig(overflow="split"), output=str(tmp_path / "o"),
                   cache_dir=str(tmp_path / "c"), plan_shard_rows=plan_shard_rows)
    o, ch = res.summary.overflow, res.summary.changes
    assert (o.targets_lost, ch.targets_lost, res.loss_tokens) == (LOST, LOST, SPLIT_KEPT)
