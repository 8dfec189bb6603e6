"""Every public rule of slabs.open_rules and every slabs check helper that indexes arrays, given
empty arrays (no slab, no segment, a row group of no rows): a proper answer (no break, no rows)
or packtool's one-line error naming the output, never numpy's IndexError/ValueError from an
index built one entry too long (`coverage([], [])` raised IndexError, `check_group` over a group
of no rows "negative dimensions are not allowed")."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from slab_support import write_pack

from packtool.align import Alignment
from packtool.errors import PacktoolError
from packtool.slabs import check, check_said, open_rules
from packtool.slabs.format import SlabManifest

E = np.zeros(0, np.int64)
NO_ROWS = (E, np.zeros(1, np.int64))  # a list column of no rows: no values, offsets [0]
SCAN = ("source_index", "chunk_index", "source_offset", "n_seg", "chunk_counts", "source_offset_counts", "shard",
        "num_loss_tokens", "dp_rank", "num_tokens", "layout_pad", "tail_pad", "fill_pad", "step", "microbatch",
        "slab_index", "row_group", "row")


@pytest.fixture(scope="module")
def sm(tmp_path_factory):
    out, _ = write_pack(str(tmp_path_factory.mktemp("pack")), [5, 9, 30], Alignment(capacity=64))
    return SlabManifest.read(out)


def _scan():
    return {**{k: E for k in SCAN}, "segments": np.zeros(1, np.int64)}


def _group(offsets):
    g = {k: (E, offsets) for k in ("input_ids", "loss_mask", "seq_lens", "cu_seqlens_padded", "cu_seqlens")}
    return {**g, "tail_pad": E, "fill_pad": E, "singleton": np.zeros(0, bool)}


def _coverage(sm):
    cov = open_rules.coverage(E, E)
    return None if cov.first_break is None and not cov.rows.size and not cov.order.size else cov


# call -> what it answers (None: no break); FormatError: packtool's one line
CASES = {
    "open_rules.coverage": _coverage,
    "open_rules.segment_fields": lambda sm: open_rules.segment_fields(_scan(), None),
    "open_rules.segment_fields (no slab offsets)": lambda sm: open_rules.segment_fields({**_scan(), "segments": E}, 64),
    **{f"open_rules.plan_breaks (dp={dp}{', nulls' if nulls else ''})":
       (lambda sm, dp=dp, nulls=nulls: open_rules.plan_breaks(E, E, E, E, dp, nulls) or None)
       for dp in (1, 2) for nulls in (None, {k: np.zeros(0, bool) for k in open_rules.DP_FIELDS})},
    "check.check_segment_counts": lambda sm: check.check_segment_counts(sm, _scan()),
    "check.check_coverage": lambda sm: check.check_coverage(sm, _scan()),
    "check.check_counts": lambda sm: check.check_counts(sm, _scan()),
    "check.check_group (offsets [0])": lambda sm: check.check_group(sm, "g", _group(np.zeros(1, np.int64)), E, E, E, E),
    "check.check_group (no offsets)": lambda sm: check.check_group(sm, "g", _group(E), E, E, E, E),
    "check.check_side_lengths": lambda sm: check.check_side_lengths("g", {"input_ids": NO_ROWS, "side": {"x": NO_ROWS}}),
    "check.check_nulls": lambda sm: check.check_nulls("p", 0, pa.table({"a": pa.array([], pa.int64())})),
    "check_said.slab_at": lambda sm: None if check_said.slab_at(sm, _scan(), 0) == f"{sm.path}: slab 0" else "?",
}
REFUSED = {"check.check_coverage": "the slabs hold no source row, the manifest says 3 sequences",
           "check.check_counts": "holds 0 tokens, the manifest says"}


@pytest.mark.parametrize("case", CASES)
def test_an_empty_input_gets_an_answer_or_one_line(sm, case):
    if case in REFUSED:
        with pytest.raises(PacktoolError) as e:
            CASES[case](sm)
        assert REFUSED[case] in str(e.value) and "\n" not in str(e.value), str(e.value)
    else:
        assert CASES[case](sm) is None
