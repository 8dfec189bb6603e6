"""verify on a slab whose lists disagree in length (`array_length`): it said the problem, then
skipped the whole batch, and the skipped rows came back as a dozen follow-on problems of its own
making (missing_sequence, manifest_stats, shard_counts, slab_index, chunk_order). Now the batch's
other rows are checked (row numbers as on disk), and the whole-output checks that need the
skipped rows' segments are skipped, said once in a note: the array_length lines are the report."""
from __future__ import annotations

import numpy as np
import pytest
from slab_support import load_rows, save_rows, write_pack

from packtool.align import Alignment
from packtool.planning.core import PackingConfig
from packtool.verification.run import verify

ALIGN = Alignment(cp=2, capacity=256)
LENGTHS = np.random.default_rng(5).integers(1, 30, 160) * 8 - 3
SHARD = "slabs-00000.parquet"
ROW = 2  # inside the first batch, with rows before and after it


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    out, _ = write_pack(str(tmp_path_factory.mktemp("clean")), LENGTHS, ALIGN, PackingConfig("bfd"),
                        shard_tokens=8192, group_tokens=2048)
    assert verify(out, workers=1).ok
    return out


def _one_more(*cols):
    def edit(c):
        for col in cols:
            c[col][ROW] = np.append(c[col][ROW], c[col][ROW][-1]).astype(c[col][ROW].dtype)
    return edit


# every list verify holds to T or n_seg, one entry too many in one slab (the corpus's
# segment_count damages, tests/slabs/test_consumers_refuse.py, among them); re-signed
DAMAGES = {col: _one_more(col) for col in ("loss_mask", "cu_seqlens", "cu_seqlens_padded", "cp_offsets",
                                           "chunk_index", "source_offset")}
DAMAGES["source_index+chunk_index"] = _one_more("source_index", "chunk_index")


def _damaged(clean, tmp_path, edit):
    import shutil
    out = str(tmp_path / "out")
    shutil.copytree(clean, out)
    cols = load_rows(out, SHARD)
    edit(cols)
    save_rows(out, SHARD, cols)
    return out


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_an_array_length_damage_is_said_alone(clean, tmp_path, damage):
    r = verify(_damaged(clean, tmp_path, DAMAGES[damage]), workers=1, batch_rows=8)
    assert set(r.counts) == {"array_length"}, [(p.check, p.row, p.message) for p in r.problems]
    assert all((p.shard, p.row) == (SHARD, ROW) for p in r.problems), r.problems
    assert sum("array_length" in n for n in r.notes) == 1, r.notes


def test_the_other_rows_of_the_batch_are_still_checked(clean, tmp_path):
    def edit(c):
        DAMAGES["chunk_index"](c)
        c["num_loss_tokens"][ROW + 3] += 1  # a row after it in the same batch
        c["num_loss_tokens"][ROW - 1] += 1  # and one before
    r = verify(_damaged(clean, tmp_path, edit), workers=1, batch_rows=8)
    assert set(r.counts) == {"array_length", "num_loss_tokens"}, r.counts
    assert sorted(p.row for p in r.problems if p.check == "num_loss_tokens") == [ROW - 1, ROW + 3], r.problems
