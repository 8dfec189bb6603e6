"""S43-10: the built-in `mistral` template packed turns out of Mistral's order (user, user;
assistant, assistant; a conversation opening with the assistant) that the model's own template
(mistral-7b-v0.1's tokenizer_config.json) raises on: `[INST] a [/INST][INST] b [/INST]`, a
layout the model never saw. Now it refuses them as Mistral's templates do (user/assistant from
a user turn, tool results and tool-call turns aside), in its plain-Python rendering and in
jinja alike; and a template's own raise_exception (the built-in's or a model folder's) is a
data error naming the row and the template's words, not "chat template failed (see
--chat-template)"."""
from __future__ import annotations

import json

import pytest
from conftest import MISTRAL_DIR
from typer.testing import CliRunner

from packtool.cli.app import app

runner = CliRunner()
U = {"role": "user", "content": "ask"}
A = {"role": "assistant", "content": "answer"}
S = {"role": "system", "content": "be brief"}
CALL = {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}
T = {"role": "tool", "content": "result"}
# turn orders Mistral's templates refuse, with the first turn out of order
REFUSED = {
    "user, user": ([U, U, A], 1),
    "assistant, assistant": ([U, A, A], 2),
    "assistant first": ([A, U, A], 0),
    "system, user, user": ([S, U, U, A], 2),
    "call then user": ([U, CALL, U, A], 2),
    "answer twice around a tool result": ([U, A, T, A], 3),
}
TAKEN = {
    "alternating": [U, A, U, A],
    "system first": [S, U, A],
    "call, result, answer": [U, CALL, T, A],
    "calls in a row": [U, CALL, T, CALL, T, A, U, A],
}
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {}}}]


def _pack(tmp_path, rows, template):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["pack", str(data), "--tokenizer", MISTRAL_DIR, "-o", str(tmp_path / "out"), "--cache-dir",
            str(tmp_path / "cache"), "-C", "512", "--no-progress", "--json"]
    if template != "folder":
        args += ["--chat-template", template]
    return runner.invoke(app, args), data


# the built-in rendered in plain Python, the built-in in jinja (a row with tools goes there), the folder's own
@pytest.mark.parametrize("template,tools", [("mistral", False), ("mistral", True), ("folder", False)],
                         ids=["mistral", "mistral jinja", "folder"])
@pytest.mark.parametrize("order", sorted(REFUSED))
def test_turns_out_of_order_are_refused_naming_the_row(tmp_path, order, template, tools):
    turns, at = REFUSED[order]
    if template == "folder" and any(m in turns for m in (S, CALL, T)):
        pytest.skip("v0.1's own template takes no system, tool call or tool turn at all")
    good = {"messages": [U, A]} | ({"tools": TOOLS} if tools else {})
    bad = {"messages": turns} | ({"tools": TOOLS} if tools else {})
    r, data = _pack(tmp_path, [good, good, bad], template)
    text = r.stdout + r.stderr
    assert r.exit_code == 2 and "Traceback" not in text, text
    line = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(line) == 1, r.stderr
    assert f"{data}, row 2: chat template" in line[0] and "refuses the row" in line[0], line[0]
    assert "alternate user/assistant" in line[0].lower(), line[0]
    if template == "mistral":
        assert f"messages[{at}] has role {turns[at]['role']}" in line[0], line[0]
    err = json.loads(r.stdout.strip().splitlines()[-1])["error"]
    assert (err["kind"], err["row"], err["flag"]) == ("input", 2, None), err  # the row's, not the template's
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("tools", [False, True], ids=["native", "jinja"])
@pytest.mark.parametrize("order", sorted(TAKEN))
def test_turns_in_order_pack(tmp_path, order, tools):
    row = {"messages": TAKEN[order]} | ({"tools": TOOLS} if tools else {})
    r, _ = _pack(tmp_path, [row], "mistral")
    assert r.exit_code == 0, r.stdout + r.stderr
