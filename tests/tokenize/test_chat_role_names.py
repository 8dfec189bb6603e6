"""A chat turn whose role is a spelling of one packtool knows (`Assistant`, `ASSISTANT`, `model`,
`gpt`, `bot`, `assistant `, `Human`...) is one line naming the row, `messages[j].role`, the value
and the role meant (S40-8). Before: the turn was rendered as context under a role no template
knows, the row was "example with no loss tokens ... no assistant tokens to train on", and the
fix it suggested, --on-empty skip, dropped the rows with real answers ("1 with no loss tokens").

The class: every alias and case/space variant x both row readers (JSON Lines, Parquet) x both
--on-empty settings (skip must not drop them: the refusal is the role's, before any count); a
turn with no role or a role that is not a string; the legal neighbours (the four roles, a role of
no known meaning such as `developer`, which a template may render) still pack."""
from __future__ import annotations

import pathlib

import pytest
from rows_support import write_rows
from typer.testing import CliRunner

from packtool.cli.app import app

T = "/work/shared/data/tokenizers/gpt2/tokenizer.json"
MEANT = {"Assistant": "assistant", "ASSISTANT": "assistant", "model": "assistant", "gpt": "assistant",
         "bot": "assistant", "assistant ": "assistant", " assistant": "assistant", "chatgpt": "assistant",
         "User": "user", "human": "user", "Human": "user", "SYSTEM": "system", "Tool": "tool",
         "observation": "tool"}


def _rows(role, extra_good=False):
    bad = {"messages": [{"role": "user", "content": "x"}, {"role": role, "content": "answer text"}]}
    if role is None:
        bad["messages"][1].pop("role")
    good = {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "answer text"}]}
    return [good, bad] if extra_good else [bad]


def _pack(tmp_path, p, *extra):
    return CliRunner().invoke(app, ["pack", str(p), "--tokenizer", T, "--chat-template", "chatml", "-C", "256",
                                    "-o", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache"), *extra])


@pytest.fixture(autouse=True)
def _tokenizer():
    if not pathlib.Path(T).exists():
        pytest.skip("no gpt2 tokenizer")


@pytest.mark.parametrize("on_empty", ["error", "skip"])
@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
@pytest.mark.parametrize("role", list(MEANT))
def test_a_spelling_of_a_role_is_named_with_the_role_meant(tmp_path, role, kind, on_empty):
    p = pathlib.Path(write_rows(tmp_path, _rows(role, extra_good=True), kind, name="in"))
    before = p.read_bytes()
    r = _pack(tmp_path, p, "--on-empty", on_empty)
    assert r.exit_code == 2, r.output
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, r.stderr
    assert f"{p}, row 1: messages[1].role is {role!r}" in errors[0] and f"rename it {MEANT[role]!r}" in errors[0], \
        errors
    assert "no loss tokens" not in r.stderr and "skipped" not in r.stderr and "Traceback" not in r.output
    assert not (tmp_path / "out").exists() and p.read_bytes() == before


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_a_turn_without_a_role_is_one_line(tmp_path, kind):
    p = pathlib.Path(write_rows(tmp_path, _rows(None, extra_good=True), kind, name="in"))
    r = _pack(tmp_path, p)
    assert r.exit_code == 2, r.output
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "row 1: messages[1].role is missing, not a role name" in errors[0], r.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("role", ["system", "user", "tool", "developer"])
def test_the_legal_neighbours_pack(tmp_path, role):
    rows = [{"messages": [{"role": "user", "content": "x"}, {"role": role, "content": "more"},
                          {"role": "assistant", "content": "answer text"}]}]
    r = _pack(tmp_path, write_rows(tmp_path, rows, "jsonl", name="in"))
    assert r.exit_code == 0, r.output


def test_a_row_with_no_assistant_turn_says_which_role_is_trained(tmp_path):
    """A role of no known meaning goes to the template; a row with no assistant turn then says
    which role is trained, so the user looks at the roles, not only at the content."""
    rows = [{"messages": [{"role": "user", "content": "x"}, {"role": "developer", "content": "answer text"}]}]
    r = _pack(tmp_path, write_rows(tmp_path, rows, "jsonl", name="in"))
    assert r.exit_code == 2, r.output
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "only a turn whose role is 'assistant'" in errors[0], r.stderr
