"""A tokenized cache whose every token is a target (plain pre-tokenized rows, no loss mask) is
counted from its lengths alone under truncate and split (reading the long rows back cost 8% of a
pre-tokenized pack's wall, stop 45): the same CutTargets as the count over the rows' masks."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from packtool.planning.cut_targets import cut_targets_of_cache
from packtool.tokenize import tokenize_to_cache
from packtool.tokenize.config import TokenizeConfig

LENGTHS = [1, 2, 3, 5, 7, 8, 9, 16, 17, 33, 40]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    d = tmp_path_factory.mktemp("all_targets")
    pq.write_table(pa.table({"input_ids": [list(range(1, n + 1)) for n in LENGTHS]}), d / "ids.parquet")
    c = tokenize_to_cache([str(d / "ids.parquet")], TokenizeConfig(shape="tokens"), str(d / "cache"), progress=False)
    assert c.num_loss_tokens == c.num_tokens  # the case the lengths alone answer
    return c


class _ReadBack:
    """The same cache, asked as one holding masks would be: its rows read back."""

    def __init__(self, cache):
        self._cache, self.num_loss_tokens, self.num_tokens = cache, -1, cache.num_tokens

    def read_rows(self, rows):
        return self._cache.read_rows(rows)


@pytest.mark.parametrize("split", [False, True], ids=["truncate", "split"])
@pytest.mark.parametrize("usable", [1, 2, 3, 7, 8, 16])
def test_lengths_alone_give_the_masks_count(cache, split, usable):
    lengths = np.asarray(LENGTHS, np.int64)
    assert cut_targets_of_cache(cache, lengths, usable, split) == \
        cut_targets_of_cache(_ReadBack(cache), lengths, usable, split)


def test_nothing_is_read_back(cache, monkeypatch):
    monkeypatch.setattr(type(cache), "read_rows", lambda *a: pytest.fail("rows read back"))
    assert cut_targets_of_cache(cache, np.asarray(LENGTHS), 8, True).targets == sum((n - 1) // 8 for n in LENGTHS)
