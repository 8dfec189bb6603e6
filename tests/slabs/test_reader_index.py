"""What `SlabIndex` derives from the check-only columns (the fill flag from source_index) must
not need them: bench/read_check.py's "checks off" leaves them unread (reader.SEGMENTS and
NULLS_ONLY emptied, the checks no-ops), and the index then built from a KeyError."""
from __future__ import annotations

import pytest
from slab_support import write_pack

import packtool.slabs.reader as reader
from packtool.align import Alignment
from packtool.planning.core import PackingConfig
from packtool.slabs.format import SlabManifest


@pytest.mark.parametrize("fixed_length", [None, 128])
def test_the_index_builds_with_the_check_only_columns_unread(tmp_path, monkeypatch, fixed_length):
    out, _ = write_pack(str(tmp_path), [40, 70, 90, 120, 30], Alignment(capacity=128, fixed_length=fixed_length),
                        PackingConfig("bfd"))
    checked = reader.SlabIndex.build(SlabManifest.read(out))
    assert checked.fill_seg.any() == (fixed_length is not None)  # the fill flag, where the checks read it
    monkeypatch.setattr(reader, "SEGMENTS", ())
    monkeypatch.setattr(reader, "NULLS_ONLY", ())
    for name in ("check_segment_counts", "check_coverage", "check_counts", "check_group"):
        monkeypatch.setattr(reader, name, lambda *a, **k: None)
    index = reader.SlabIndex.build(SlabManifest.read(out))
    assert len(index) == len(checked) and not index.fill_seg.any()
    row = reader.SlabReader(SlabManifest.read(out), index).row(0)  # and its rows read without cp_offsets
    assert row.input_ids.size == int(row.seg_padded.sum())
