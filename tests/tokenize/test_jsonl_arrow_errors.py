"""S32-1: JSON Lines that Python's json reads but Arrow's reader refuses get a fix that matches
the problem; only a real type change says "give the field one type in every row". Each case
is read both as an input and as a `--lengths` file (the same parser)."""
from __future__ import annotations

import re

import pytest

from packtool.errors import PacktoolError
from packtool.planning.lengths import load_lengths
from packtool.tokenize.readers import iter_batches, resolve_inputs

# name -> (line 2 of the file, what the error must say)
CASES = {
    "lone high surrogate": (rb'{"length": 1, "text": "\ud800 x"}', r"lone UTF-16 surrogate.*remove it or replace"),
    "lone low surrogate": (rb'{"length": 1, "text": "\udc00"}', r"lone UTF-16 surrogate"),
    "key twice": (rb'{"length": 1, "text": "b", "text": "c"}', r"key 'text' appears twice in one object; keep one"),
    "nested key twice": (rb'{"length": 1, "text": "b", "m": {"k": 1, "k": 2}}', r"key 'm/k' appears twice"),
    "not an object": (rb'[1, 2]', r"the line is a JSON array, not an object"),
    "a number": (rb'7', r"the line is a JSON number, not an object"),
    "number out of range": (rb'{"length": 1, "text": "b", "n": 1e400}', r"beyond the float64 range"),
    "type change": (rb'{"length": 1, "text": 5}', r"field text is a JSON number here but a string at line 1; "
                                                   r"give the field one type in every row"),
}


def _write(tmp_path, case: str):
    p = tmp_path / "d.jsonl"
    p.write_bytes(b'{"length": 3, "text": "a", "m": {"k": 0}, "n": 1.5}\n' + CASES[case][0] + b"\n")
    return p


@pytest.mark.parametrize("case", sorted(CASES))
def test_input_parse_error_says_the_right_fix(tmp_path, case):
    p = _write(tmp_path, case)
    with pytest.raises(PacktoolError) as e:
        for f in resolve_inputs([str(p)]):
            for _ in iter_batches(f, 1000):
                pass
    msg = str(e.value)
    assert msg.startswith(f"{p}: at line 2: "), msg
    assert re.search(CASES[case][1], msg), msg
    assert ("one type" in msg) == (case == "type change"), msg


@pytest.mark.parametrize("case", sorted(CASES))
def test_lengths_parse_error_says_the_right_fix(tmp_path, case):
    p = _write(tmp_path, case)
    with pytest.raises(PacktoolError) as e:
        load_lengths(str(p))
    assert re.search(CASES[case][1], str(e.value)), str(e.value)
