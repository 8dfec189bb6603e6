"""Pre-tokenized mask columns (S32-7, S32-8): `loss_mask` and `attention_mask` hold 0/1 (or
bools) only, and an `attention_mask` 0 (padding) is refused, never packed as a real token."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from packtool.errors import PacktoolInputError
from packtool.tokenize import tokenize_to_cache
from packtool.tokenize.config import TokenizeConfig

IDS = [[1, 2, 3], [4, 5, 6, 7]]


def _write(tmp_path, fmt: str, cols: dict) -> str:
    if fmt == "parquet":
        path = tmp_path / "in.parquet"
        pq.write_table(pa.table({k: pa.array(v) for k, v in cols.items()}), path)
    else:
        path = tmp_path / "in.jsonl"
        path.write_text("".join(json.dumps(dict(zip(cols, r))) + "\n" for r in zip(*cols.values())))
    return str(path)


def _tokenize(path, cache_dir):
    return tokenize_to_cache([path], TokenizeConfig(shape="tokens"), cache_dir, progress=False)


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
@pytest.mark.parametrize("col", ["loss_mask", "attention_mask"])
@pytest.mark.parametrize("value, shown", [(-1, "-1"), (2, "2"), (-100, "-100"), (0.5, "0.5"), (1.5, "1.5")])
def test_a_mask_value_other_than_0_1_is_refused(tmp_path, cache_dir, fmt, col, value, shown):
    mask = [[1, 1, 1], [1, 1, value, 1]]
    path = _write(tmp_path, fmt, {"input_ids": IDS, col: mask})
    with pytest.raises(PacktoolInputError, match=rf"in\.{fmt}, row 1: {col}\[2\] is {shown}: a mask holds 0 or 1 "
                                                 rf".*rewrite the column as 0/1"):
        _tokenize(path, cache_dir)


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
@pytest.mark.parametrize("beside", [{}, {"loss_mask": [[0, 1, 1], [0, 1, 1, 1]]},
                                    {"labels": [[-100, 2, 3], [-100, 5, 6, 7]]}])
@pytest.mark.parametrize("where", [(0, 2), (1, 0)])
def test_attention_mask_padding_is_refused(tmp_path, cache_dir, fmt, beside, where):
    attn = [[1] * len(r) for r in IDS]
    attn[where[0]][where[1]] = 0
    path = _write(tmp_path, fmt, {"input_ids": IDS, **beside, "attention_mask": attn})
    with pytest.raises(PacktoolInputError, match=rf"row {where[0]}: attention_mask\[{where[1]}\] is 0: the row "
                                                 r"holds padding.*tokenize without padding"):
        _tokenize(path, cache_dir)


@pytest.mark.parametrize("mask", [[[1, 1, 1], [1, 1, 1, 1]], [[True] * 3, [True] * 4], [[1.0] * 3, [1.0] * 4]])
def test_an_all_ones_attention_mask_changes_nothing(tmp_path, cache_dir, mask):
    path = _write(tmp_path, "parquet", {"input_ids": IDS, "loss_mask": [[0, 1, 1], [0, 0, 1, 1]],
                                        "attention_mask": mask})
    c = _tokenize(path, cache_dir)
    r = c.read_rows(np.arange(c.num_rows))
    assert r.input_ids.tolist() == [t for row in IDS for t in row]
    assert r.loss_mask.tolist() == [0, 1, 1, 0, 0, 1, 1]


def test_a_bool_loss_mask_is_read(tmp_path, cache_dir):
    path = _write(tmp_path, "parquet", {"input_ids": IDS, "loss_mask": [[False, True, True], [True] * 4]})
    c = _tokenize(path, cache_dir)
    assert c.read_rows(np.arange(c.num_rows)).loss_mask.tolist() == [0, 1, 1, 1, 1, 1, 1]
