"""S47A-4: a chat template that renders a row of turns as nothing (an empty .jinja, one looping
over another variable than `messages`, a folder's empty chat_template.jinja or config template)
was "empty example: messages is null or holds no turns; drop the row", and under --on-empty skip
every templated row was dropped as empty. Now such a row is refused in one line naming the
template and the row's turns, flag --chat-template, under either --on-empty; rows the data makes
empty stay empty examples."""
from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from conftest import GPT2
from packtool.cli.app import app

runner = CliRunner()
WRONG = "{% for m in conversation %}{{ m.content }}{% endfor %}"
DOORS = {"empty file": ("file", ""), "whitespace file": ("file", " \n\n"), "other variable": ("file", WRONG),
         "folder's empty chat_template.jinja": ("jinja", ""), "folder config's template": ("config", WRONG)}
ROWS = {"chat": {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]},
        "sharegpt": {"conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b"}]}}


def _door(tmp_path, door):
    kind, text = DOORS[door]
    if kind == "file":
        (tmp_path / "t.jinja").write_text(text)
        return ["--tokenizer", GPT2, "--chat-template", str(tmp_path / "t.jinja")]
    (tmp_path / "tok").mkdir()
    shutil.copy(GPT2, tmp_path / "tok" / "tokenizer.json")
    if kind == "jinja":
        (tmp_path / "tok" / "chat_template.jinja").write_text(text)
    else:
        (tmp_path / "tok" / "tokenizer_config.json").write_text(json.dumps({"chat_template": text}))
    return ["--tokenizer", str(tmp_path / "tok")]


@pytest.mark.parametrize("on_empty", ["error", "skip"])
@pytest.mark.parametrize("shape", sorted(ROWS))
@pytest.mark.parametrize("door", sorted(DOORS))
def test_a_template_rendering_nothing_is_named_not_the_row(tmp_path, door, shape, on_empty):
    p = tmp_path / "c.jsonl"
    p.write_text(json.dumps(ROWS[shape]) + "\n")
    r = runner.invoke(app, ["pack", str(p), "-C", "1024", "--dry-run", "--no-progress", "--json", "--on-empty", on_empty,
                            "--cache-dir", str(tmp_path / "cache"), *_door(tmp_path, door)])
    assert r.exit_code == 2, r.stdout + r.stderr
    err = json.loads(r.stdout)["error"]
    assert "rendered nothing for this row (2 turns)" in err["message"] and "empty example" not in err["message"], err
    assert err["row"] == 0 and err["flag"] == "--chat-template", err
