"""S47A-6: pre-tokenized rows whose loss mask is under the name their toolchain gives it
(transformers' `apply_chat_template(..., return_assistant_tokens_mask=True)` -> `assistant_masks`,
TRL's tokenized prompt-completion rows -> `completion_mask`) were packed with every token a
target, rc 0, no note: the prompt trained on. Now both are read as `loss_mask` is (0/1 only,
one per token, held to agree with any other loss column the row gives), and any other column
beside `input_ids` named as a mask (`mask`, `response_mask`, `action_mask`, ...) is refused in
one line naming it, never passed over. Over every door: Parquet, JSON Lines, Arrow, a
`pyarrow.Table` and a `datasets.Dataset` given to the library."""
from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from packtool import notes
from packtool.cli.app import app
from packtool.errors import PacktoolInputError
from packtool.packing import pack
from rows_support import slab_masks, table_as
from conftest import GPT2

runner = CliRunner()
IDS = [[11, 12, 13, 14, 15, 16], [21, 22, 23]]
MASK = [[0, 0, 0, 0, 1, 1], [0, 1, 1]]
LOSS_NAMES = ["loss_mask", "assistant_masks", "completion_mask"]
# mask-named columns no rule reads: what each 1 means is not packtool's to guess
UNKNOWN = ["mask", "masks", "response_mask", "action_mask", "prompt_mask", "label_mask", "loss_masks", "Loss_Mask"]
KINDS = ["parquet", "jsonl", "arrow", "table", "datasets"]


def _table(cols: dict) -> pa.Table:
    return pa.table({"input_ids": pa.array(IDS, pa.list_(pa.int32())),
                     **{k: pa.array(v, pa.list_(pa.int64())) for k, v in cols.items()}})


def _write(tmp_path, kind: str, cols: dict):
    return table_as(tmp_path, kind, _table(cols))


def _pack(tmp_path, src, *flags):
    """(error message or None, {source row: its slab loss_mask})"""
    out = str(tmp_path / f"out{len(list(tmp_path.glob('out*')))}")
    if not isinstance(src, str):
        try:
            pack(src, output=out, cache_dir=str(tmp_path / "cache"))
        except PacktoolInputError as e:
            assert not os.path.exists(out)
            return str(e), None
    else:
        r = runner.invoke(app, ["pack", src, "-C", "64", "-o", out, "--no-progress", "--cache-dir",
                                str(tmp_path / "cache"), "--json", *flags])
        assert "Traceback" not in r.stdout + r.stderr
        if r.exit_code:
            assert r.exit_code == 2 and not os.path.exists(out), r.stdout + r.stderr
            return json.loads(r.stdout)["error"]["message"], None
    return None, slab_masks(out)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", LOSS_NAMES)
def test_a_loss_mask_under_its_toolchain_name_is_read_as_loss_mask(tmp_path, kind, name):
    err, masks = _pack(tmp_path, _write(tmp_path, kind, {name: MASK}))
    assert err is None, err
    assert masks == {0: MASK[0], 1: MASK[1]}, masks


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", UNKNOWN)
def test_a_mask_column_no_rule_reads_is_refused_naming_it(tmp_path, kind, name):
    err, _ = _pack(tmp_path, _write(tmp_path, kind, {name: MASK}))
    assert err is not None and "\n" not in err, err
    assert f"column {name} " in err and "rename it loss_mask" in err and "drop" in err, err


@pytest.mark.parametrize("kind", ["parquet", "jsonl"])
@pytest.mark.parametrize("name, other", [(n, o) for n in ("assistant_masks", "completion_mask")
                                         for o in ("loss_mask", "labels")])
def test_two_loss_columns_that_disagree_are_refused(tmp_path, kind, name, other):
    off = [[0, 0, 0, 0, 1, 1], [0, 0, 1]]  # row 1 token 1: `name` says a target, `other` not
    said = ([[-100 if not m else i for i, m in zip(r, mr)] for r, mr in zip(IDS, off)] if other == "labels" else off)
    err, _ = _pack(tmp_path, _write(tmp_path, kind, {name: MASK, other: said}))
    assert err is not None and "row 1" in err and "disagree" in err, err
    assert name in err and other in err, err


@pytest.mark.parametrize("kind", ["parquet", "jsonl"])
@pytest.mark.parametrize("other", ["loss_mask", "labels", "completion_mask"])
def test_two_loss_columns_that_agree_pack_as_either_says(tmp_path, kind, other):
    said = ([[-100 if not m else i for i, m in zip(r, mr)] for r, mr in zip(IDS, MASK)] if other == "labels" else MASK)
    err, masks = _pack(tmp_path, _write(tmp_path, kind, {"assistant_masks": MASK, other: said}))
    assert err is None, err
    assert masks == {0: MASK[0], 1: MASK[1]}, masks


# RA-16: TRL writes both masks for a conversational prompt-completion row under assistant_only_loss:
# completion_mask 1 over the whole completion (its role header too), assistant_masks 1 inside the
# template's generation blocks, and trains where both are 1. They differ on the header by
# construction: refused ("drop the column that is wrong"), neither was; both are read as TRL does.
TRL = {"completion_mask": [[0, 0, 1, 1, 1, 1], [0, 1, 1]], "assistant_masks": [[0, 0, 0, 1, 1, 0], [0, 0, 1]]}
BOTH = [[0, 0, 0, 1, 1, 0], [0, 0, 1]]


@pytest.mark.parametrize("kind", KINDS)
def test_trls_two_masks_train_where_both_are_1(tmp_path, kind):
    start = notes.mark()
    err, masks = _pack(tmp_path, _write(tmp_path, kind, TRL))
    assert err is None, err
    assert masks == {0: BOTH[0], 1: BOTH[1]}, masks
    said = [n for n in notes.since(start) if "assistant_masks" in n and "completion_mask" in n]
    assert len(said) == 1 and "where both are 1, as TRL trains" in said[0], notes.since(start)


@pytest.mark.parametrize("other", ["loss_mask", "labels"])
@pytest.mark.parametrize("agrees", [True, False], ids=["agrees", "is completion_mask"])
def test_a_third_loss_column_is_held_to_where_both_are_1(tmp_path, other, agrees):
    mask = BOTH if agrees else TRL["completion_mask"]
    said = [[-100 if not m else i for i, m in zip(r, mr)] for r, mr in zip(IDS, mask)] if other == "labels" else mask
    err, masks = _pack(tmp_path, _write(tmp_path, "parquet", {**TRL, other: said}))
    if agrees:
        assert err is None and masks == {0: BOTH[0], 1: BOTH[1]}, (err, masks)
    else:
        assert err is not None and "disagree" in err and other in err and "row 0" in err, err
        assert "assistant_masks AND completion_mask" in err, err


@pytest.mark.parametrize("name", ["assistant_masks", "completion_mask"])
@pytest.mark.parametrize("value", [2, -1, -100])
def test_a_value_other_than_0_1_is_refused_as_in_loss_mask(tmp_path, name, value):
    bad = [[0, 0, 0, 0, 1, 1], [0, value, 1]]
    err, _ = _pack(tmp_path, _write(tmp_path, "parquet", {name: bad}))
    assert err is not None and f"{name}[1] is {value}: a mask holds 0 or 1" in err and "row 1" in err, err


@pytest.mark.parametrize("name", ["assistant_masks", "completion_mask"])
def test_a_mask_of_another_length_is_refused(tmp_path, name):
    err, _ = _pack(tmp_path, _write(tmp_path, "jsonl", {name: [MASK[0], [0, 1]]}))
    assert err is not None and f"{name} holds 2 values but input_ids 3" in err and "row 1" in err, err


@pytest.mark.parametrize("kind", ["parquet", "jsonl"])
def test_known_non_loss_masks_and_side_columns_are_not_refused(tmp_path, kind):
    """`special_tokens_mask` (tokenizer(..., return_special_tokens_mask=True)) says nothing of the loss:
    not read, as before; a mask-named column the user carries as a side column is theirs."""
    err, masks = _pack(tmp_path, _write(tmp_path, kind, {"special_tokens_mask": MASK}))
    assert err is None and masks == {0: [0] + [1] * 5, 1: [0, 1, 1]}, (err, masks)
    err, masks = _pack(tmp_path, _write(tmp_path, kind, {"action_mask": MASK}), "--side-columns", "action_mask")
    assert err is None and masks == {0: [0] + [1] * 5, 1: [0, 1, 1]}, (err, masks)


def test_a_mask_column_of_another_shape_is_not_judged(tmp_path):
    """The rule is a pre-tokenized row's: a text row's `mask` field is no per-token column."""
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps({"text": "hello world", "mask": "x"}) + "\n")
    r = runner.invoke(app, ["pack", str(p), "-C", "64", "-o", str(tmp_path / "out"), "--no-progress",
                            "--tokenizer", GPT2, "--cache-dir", str(tmp_path / "cache"), "--json"])
    assert r.exit_code == 0, r.stdout + r.stderr
