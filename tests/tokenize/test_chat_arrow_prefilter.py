"""row_checks.rows_with_empty_turns reads off a batch's Arrow struct which rows surely hold no
empty turn (every turn has text or a tool call), so that render_batch asks null_message /
null_value only of the rest: a row it passes over must be one where they find nothing, for
every kind of content, call, null turn, null row and slice."""
from __future__ import annotations

import itertools

import pyarrow as pa
import pytest

from packtool.tokenize.row_checks import null_message, null_value, rows_with_empty_turns

CALL = {"name": "f", "arguments": "{}"}
CONTENTS = {"string": ["T", "", None], "parts": [[{"type": "text", "text": "T"}], [{"type": "text", "text": ""}], [],
                                                 None]}
CALLS = [{}, {"tool_call": CALL}, {"tool_calls": []}, {"tool_calls": [{"type": "function", "function": CALL}]}]


def _rows(kind: str, contents: list) -> list:
    """One row per (content, call) pair, each beside a turn with text; a null turn; a null row."""
    if kind == "sharegpt":
        turns = [{"from": "human", "value": c} for c in contents]
        rows = [[{"from": "human", "value": "Q"}, t] for t in turns]
    else:
        turns = [{"role": "assistant", "content": c, **call} for c, call in itertools.product(contents, CALLS)]
        rows = [[{"role": "user", "content": contents[0]}, t] for t in turns]
    return rows + [[None, rows[0][0]], None, []]


@pytest.mark.parametrize("layout", ["whole", "sliced", "null row over turns"])
@pytest.mark.parametrize("kind,family", [("chat", "string"), ("chat", "parts"), ("sharegpt", "string")])
def test_rows_passed_over_have_no_empty_turn(kind, family, layout):
    rows = _rows(kind, CONTENTS[family])
    col = pa.array(rows)
    is_null = null_message if kind == "chat" else null_value
    if layout == "sliced":  # offsets into a longer child, as a block's batches are
        col = pa.concat_arrays([col, col]).slice(3, len(rows))
    elif layout == "null row over turns":  # a null row whose offsets still span an empty turn
        first = next(i for i, r in enumerate(rows) if r and any(is_null(m) for m in r))
        col = pa.ListArray.from_arrays(col.offsets, col.values, mask=pa.array([i == first for i in range(len(col))]))
    maybe = rows_with_empty_turns(col, kind)
    found = [any(is_null(m) for m in r or ()) for r in col.to_pylist()]
    assert all(m or not f for m, f in zip(maybe.tolist(), found)), (maybe, found)
    assert sum(maybe.tolist()) == sum(found) if family == "string" else sum(maybe.tolist()) >= sum(found)
