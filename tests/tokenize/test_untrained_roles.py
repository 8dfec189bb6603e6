"""A chat row whose replies sit under a role of no known meaning (`developer`, `narrator`,
`critic`) has no trained turn (stop 40 Left 1, issue 23 class 5). Before: under --on-empty
error the line said only "gives no assistant tokens to train on", and --on-empty skip dropped
the rows with a bare count ("1 with no loss tokens"): a data set naming its replies `narrator`
lost them without a word on why. Now the refusal names the row's roles, the role that trains
and the fix (packtool has no role map: rename the role in the data); a skip names them in a
note per file (kept in cache.json, said again when the cache is reused), in the summary's
warning and in --json (`skipped_roles`, `notes`)."""
from __future__ import annotations

import json

import pytest
from conftest import GPT2
from rows_support import write_rows
from typer.testing import CliRunner

from packtool.cli.app import app

ROLES = ["developer", "narrator", "critic", "Narrator", "reviewer"]
GOOD = {"messages": [{"role": "user", "content": "question"}, {"role": "assistant", "content": "answer"}]}
RENAME = "rename the role that holds the replies to 'assistant' in the data"


def _rows(role: str) -> list[dict]:
    bad = {"messages": [{"role": "user", "content": "question"}, {"role": role, "content": "the reply"}]}
    return [GOOD, GOOD, bad, GOOD]


def _pack(tmp_path, path, on_empty, *pre, out="out"):
    return CliRunner().invoke(app, [*pre, "pack", path, "--tokenizer", GPT2, "--chat-template", "chatml", "-C", "256",
                                    "-o", str(tmp_path / out), "--cache-dir", str(tmp_path / "cache"),
                                    "--on-empty", on_empty, "--no-progress"])


def _said(role: str) -> list[str]:
    return [repr(role), "only a turn whose role is 'assistant'", RENAME]


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
@pytest.mark.parametrize("role", ROLES)
def test_error_names_the_rows_roles_and_the_role_that_trains(tmp_path, role, kind):
    path = write_rows(tmp_path, _rows(role), kind, name="chat")
    r = _pack(tmp_path, path, "error")
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, r.stderr
    line = errors[0]
    assert f"{path}, row 2: " in line and f"its turns' roles are 'user', {role!r}" in line, line
    assert all(w in line for w in _said(role)) and "--on-empty skip" in line, line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
@pytest.mark.parametrize("role", ROLES)
def test_skip_names_the_roles_where_the_count_is(tmp_path, role, kind):
    path = write_rows(tmp_path, _rows(role), kind, name="chat")
    r = _pack(tmp_path, path, "skip")
    assert r.exit_code == 0, r.output
    warning = [ln for ln in r.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warning) == 1 and "1 row(s) skipped by --on-empty skip (0 empty, 1 with no loss tokens)" in warning[0]
    assert f"{role!r} (1)" in warning[0] and all(w in warning[0] for w in _said(role)), warning
    said = [ln for ln in r.stderr.splitlines() if ln.startswith(f"packtool: {path}: 1 chat row skipped")]
    assert len(said) == 1 and f"{role!r} (1 row, first row 2)" in said[0], r.stderr
    assert all(w in said[0] for w in _said(role)), said

    # --json, from the cache the first run made: the note is said again and the roles counted
    j = _pack(tmp_path, path, "skip", "--json", out="out2")
    assert j.exit_code == 0, j.output
    d = json.loads(j.stdout.strip().splitlines()[-1])
    assert d["skipped_rows"] == {"empty": 0, "all_masked": 1}, d["skipped_rows"]
    assert d["skipped_roles"] == {"user": 1, role: 1}, d
    assert any(f"{role!r} (1 row, first row 2)" in n and RENAME in n for n in d["notes"]), d["notes"]


def test_a_reply_of_weight_0_says_the_weight(tmp_path):
    """The neighbour: the row has an assistant turn, of weight 0: the fix is the weight, not a
    rename."""
    bad = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "weight": 0}]}
    path = write_rows(tmp_path, [GOOD, bad], "jsonl", name="chat")
    r = _pack(tmp_path, path, "error")
    assert r.exit_code == 2, r.output
    line = next(ln for ln in r.stderr.splitlines() if ln.startswith("error:"))
    assert "its turns' roles are 'user', 'assistant'" in line and "weight of 1" in line and RENAME not in line, line
