"""S44-1: pre-tokenized rows that give both `loss_mask` and `labels` are read by both. Where they
disagree on a token (a target by one, not by the other) the pack is refused in one line naming
the file, the row, the token and the fix (keep one column), exit 2, no output; where they agree
the rows pack as either says (a row's first token, never a target in a slab, aside). Every way such rows come in: Parquet, JSON lines, Arrow and a
`pyarrow.Table` given to the library, in both directions of disagreement."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.errors import PacktoolInputError
from packtool.packing import pack
from rows_support import slab_masks, table_as

runner = CliRunner()
IDS = [[1, 2, 3], [4, 5, 6, 7]]
AGREE = {"same": {"labels": [[-100, 2, 3], [-100, -100, 6, 7]], "loss_mask": [[0, 1, 1], [0, 0, 1, 1]]},
         # a row's first token is never a target in a slab: there the two may differ
         "first_token": {"labels": [[1, 2, 3], [4, -100, 6, 7]], "loss_mask": [[0, 1, 1], [1, 0, 1, 1]]}}
# row 1 token 2: labels says a target (6), loss_mask says not (0); or the other way round
DISAGREE = {"mask_off": ({"labels": [[-100, 2, 3], [-100, -100, 6, 7]], "loss_mask": [[0, 1, 1], [0, 0, 0, 1]]},
                         "loss_mask[2] is 0 but labels[2] is 6"),
            "mask_on": ({"labels": [[-100, 2, 3], [-100, -100, -100, 7]], "loss_mask": [[0, 1, 1], [0, 0, 1, 1]]},
                        "loss_mask[2] is 1 but labels[2] is -100")}


def _table(cols: dict) -> pa.Table:
    return pa.table({"input_ids": pa.array(IDS, pa.list_(pa.int32())),
                     "labels": pa.array(cols["labels"], pa.list_(pa.int32())),
                     "loss_mask": pa.array(cols["loss_mask"], pa.list_(pa.int8()))})


def _write(tmp_path, kind: str, cols: dict):
    return table_as(tmp_path, kind, _table(cols))


KINDS = ["parquet", "jsonl", "arrow", "table"]


def _pack(tmp_path, src):
    out = str(tmp_path / "out")
    if not isinstance(src, str):
        return pack(src, output=out, cache_dir=str(tmp_path / "cache")), out
    r = runner.invoke(app, ["pack", src, "-C", "64", "-o", out, "--no-progress", "--cache-dir",
                            str(tmp_path / "cache"), "--json"])
    return r, out


@pytest.mark.parametrize("way", sorted(DISAGREE))
@pytest.mark.parametrize("kind", KINDS)
def test_disagreeing_loss_mask_and_labels_are_refused(tmp_path, kind, way):
    cols, words = DISAGREE[way]
    src = _write(tmp_path, kind, cols)
    if kind == "table":
        with pytest.raises(PacktoolInputError) as e:
            _pack(tmp_path, src)
        msg = str(e.value)
    else:
        r, out = _pack(tmp_path, src)
        assert r.exit_code == 2, r.stdout + r.stderr
        assert "Traceback" not in r.stderr and not (tmp_path / "out").exists()
        msg = json.loads(r.stdout)["error"]["message"]
        assert "row 1" in msg and src.split("/")[-1] in msg, msg
    assert words in msg and "drop" in msg, msg


@pytest.mark.parametrize("case", sorted(AGREE))
@pytest.mark.parametrize("kind", KINDS)
def test_agreeing_loss_mask_and_labels_pack_as_either_says(tmp_path, kind, case):
    src = _write(tmp_path, kind, AGREE[case])
    res, out = _pack(tmp_path, src)
    if kind != "table":
        assert res.exit_code == 0, res.stdout + res.stderr
    masks = slab_masks(out)
    assert masks == {0: [0, 1, 1], 1: [0, 0, 1, 1]}, masks
