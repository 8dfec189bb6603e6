"""A key given twice in one JSON object is refused by every reader of JSON a user wrote or may
edit, naming the file and the line (from 1; a row from 0 where there is one), never read as
its last value: JSON Lines (Arrow's refusal), a `.json` array and a `.json` holding JSON Lines,
a JSON Lines lengths file, tokenizer_config.json, a dataset's state.json, a plan file's
settings and a manifest (packtool.json_text, the rule's one owner, for all but Arrow's)."""
from __future__ import annotations

import os
import re
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import GPT2, gsm8k_output

from packtool.errors import PacktoolError
from packtool.planning.lengths import load_lengths
from packtool.tokenize.readers import iter_batches, resolve_inputs


def _rows(path):
    for f in resolve_inputs([path]):
        for _ in iter_batches(f, 1000):
            pass


def _data(name, body):
    def make(tmp_path):
        p = tmp_path / name
        p.write_text(body)
        return (lambda: _rows(str(p))), str(p)
    return make


def _lengths(tmp_path):
    p = tmp_path / "l.jsonl"
    p.write_text('{"length": 3}\n{"length": 4, "length": 5}\n')
    return (lambda: load_lengths(str(p))), str(p)


def _tokenizer_config(tmp_path):
    from packtool.tokenize.config import TokenizeConfig
    from packtool.tokenize.encode import load_tokenizer
    (tmp_path / "tok").mkdir()
    shutil.copy(GPT2, tmp_path / "tok" / "tokenizer.json")
    p = tmp_path / "tok" / "tokenizer_config.json"
    p.write_text('{\n "bos_token": "<|endoftext|>",\n "eos_token": "<|endoftext|>",\n "eos_token": "x"\n}\n')
    return (lambda: load_tokenizer(str(tmp_path / "tok"), TokenizeConfig())), str(p)


def _state_json(tmp_path):
    d = tmp_path / "ds"
    d.mkdir()
    (d / "dataset_info.json").write_text("{}")
    p = d / "state.json"
    p.write_text('{"_data_files": [{"filename": "a.arrow"}],\n "_data_files": [{"filename": "b.arrow"}]}')
    return (lambda: resolve_inputs([str(d)])), str(p)


def _plan_file(tmp_path):
    from packtool.align import Alignment
    from packtool.planning.core import plan
    from packtool.planning.plan_file import META_KEY, read_plan_config, write_plan
    p = str(tmp_path / "plan.parquet")
    write_plan(plan(np.array([10, 20, 30]), Alignment(capacity=64)), p)
    t = pq.read_table(p)
    meta = t.schema.metadata[META_KEY]
    pq.write_table(t.replace_schema_metadata({META_KEY: b'{"num_sequences": 9, ' + meta[1:]}), p)
    return (lambda: read_plan_config(p)), p


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    return str(gsm8k_output(tmp_path_factory.mktemp("dup")) / "out")


def _manifest(tmp_path, packed):
    from packtool.slabs.format import read_manifest
    out = tmp_path / "out"
    shutil.copytree(packed, out)
    p = out / ".manifest.json"
    text = p.read_text()
    p.write_text(text.replace("{", '{"schema_version": 99,', 1))  # the later, real value used to win
    return (lambda: read_manifest(str(out))), str(p)


CASES = {  # reader -> (its file made, the line of the key's second occurrence, the key, row)
    "json array": (_data("d.json", '[{"text": "a"},\n {"text": "b",\n  "text": "c"}]'), 3, "text", 1),
    "json array, nested": (_data("d.json", '[{"text": "a",\n "m": [{"k": 1,\n "k": 2}]}]'), 3, "k", 0),
    "json array, first row": (_data("d.json", '\n[{"text": "a", "text": "b"}]'), 2, "text", 0),
    "json lines": (_data("d.jsonl", '{"text": "a"}\n{"text": "b", "text": "c"}\n'), 2, "text", None),
    "json lines, nested": (_data("d.jsonl", '{"text": "a", "m": {"k": 1, "k": 2}}\n'), 1, "m/k", None),
    ".json of json lines": (_data("d.json", '{"text": "a"}\n{"text": "b", "text": "c"}\n'), 2, "text", None),
    "lengths .jsonl": (_lengths, 2, "length", None),
    "tokenizer_config.json": (_tokenizer_config, 4, "eos_token", None),
    "datasets state.json": (_state_json, 2, "_data_files", None),
    "plan file settings": (_plan_file, 1, "num_sequences", None),
    "manifest": (_manifest, None, "schema_version", None),  # None: the real key's line, read below
}


@pytest.mark.parametrize("case", CASES)
def test_a_key_given_twice_is_refused_naming_file_and_line(tmp_path, packed, case):
    make, line, key, row = CASES[case]
    call, path = make(tmp_path, packed) if make is _manifest else make(tmp_path)
    with pytest.raises(PacktoolError) as e:
        call()
    msg = str(e.value)
    if line is None:  # the manifest's own schema_version: the repeat, after the one put on line 1
        text = open(path).read()
        line = text[:text.index(f'"{key}"', text.index(f'"{key}"') + 1)].count("\n") + 1
        assert line > 1
    assert path in msg and f"key '{key}' appears twice in one object" in msg, msg
    assert re.search(rf"\bline {line}\b", msg) and "from 1)" in msg, msg
    if row is not None:
        assert f"row {row}" in msg and "rows count from 0" in msg and e.value.row == row, msg


def test_no_repeat_no_change(tmp_path):
    p = tmp_path / "d.json"
    p.write_text('[{"text": "a", "m": {"k": 1}}, {"text": "b", "m": {"k": 2}}]')
    (f,) = resolve_inputs([str(p)])
    assert [b.to_pylist() for b in iter_batches(f, 10)] == [[{"text": "a", "m": {"k": 1}},
                                                             {"text": "b", "m": {"k": 2}}]]
    assert os.path.exists(p) and pa is not None
