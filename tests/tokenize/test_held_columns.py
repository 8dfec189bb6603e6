"""S34-1: LLaMA-Factory's alpaca rows carry `system` (a system prompt) and `history` (earlier
[instruction, response] turns); beside instruction/output, prompt/completion or question/answer
they were dropped without a word, with or without a chat template. A row holding either is now
refused in one line naming the column, alike across the three shapes; null, "" and [] hold nothing
and pack as before."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import GPT2

from packtool.errors import PacktoolInputError
from packtool.tokenize import TokenizeConfig, tokenize_to_cache

ROWS = {  # shape -> (a row of it, the config beyond the tokenizer that packs it)
    "alpaca": ({"instruction": "I", "input": "", "output": "O"}, {}),
    "alpaca_response": ({"instruction": "I", "response": "O"}, {}),
    "prompt_completion": ({"prompt": "P", "completion": "C"}, {}),
    "question_answer": ({"question": "Q", "answer": "A"}, {}),
    "fields": ({"q": "Q", "a": "A"}, {"prompt_field": "q", "response_field": "a"}),
}
HELD = {"system": "SYS", "history": [["H1", "HA1"]]}


def _pack(tmp_path, rows, extra, template, parquet=False):
    tmp_path.mkdir(exist_ok=True)
    if parquet:
        f = tmp_path / "in.parquet"
        pq.write_table(pa.Table.from_pylist(rows), f)
    else:
        f = tmp_path / "in.jsonl"
        f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = TokenizeConfig(tokenizer=GPT2, chat_template=template, **extra)
    return tokenize_to_cache([str(f)], cfg, str(tmp_path / "c"), progress=False)


@pytest.mark.parametrize("parquet", [False, True], ids=["jsonl", "parquet"])
@pytest.mark.parametrize("template", [None, "chatml"])
@pytest.mark.parametrize("column", sorted(HELD))
@pytest.mark.parametrize("shape", sorted(ROWS))
def test_system_or_history_is_refused_by_name(tmp_path, shape, column, template, parquet):
    row, extra = ROWS[shape]
    # the value sits in the second row: the first, without it, must not hide it
    rows = [{**row, column: None}, {**row, column: HELD[column]}]
    with pytest.raises(PacktoolInputError) as e:
        _pack(tmp_path, rows, extra, template, parquet)
    msg = str(e.value)
    assert "\n" not in msg and f"column {column} holds" in msg and "row 1" in msg
    assert "--shape chat" in msg or "shape='chat'" in msg


@pytest.mark.parametrize("template", [None, "chatml"])
@pytest.mark.parametrize("shape", sorted(ROWS))
def test_empty_system_and_history_pack_as_without(tmp_path, shape, template):
    row, extra = ROWS[shape]
    plain = _pack(tmp_path / "a", [row], extra, template)
    held = _pack(tmp_path / "b", [{**row, "system": "", "history": []}, {**row, "system": None, "history": None}],
                 extra, template)
    first, both = plain.read_rows([0]), held.read_rows([0, 1])
    assert both.input_ids.tolist() == first.input_ids.tolist() * 2
    assert both.loss_mask.tolist() == first.loss_mask.tolist() * 2
