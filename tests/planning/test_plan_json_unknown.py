"""`plan --lengths --json` under `--overflow truncate` / `split`: the figures only the loss masks
hold (targets lost at the cuts; truncate's sequences cut to no target) are null, as the table's
`?`, never 0; `pack --dry-run --json` and `pack --json` over the same rows count them (one number
from the tokenized masks), and the figures the lengths do hold agree across all three."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from packtool.cli.app import app

LENS = [5, 40, 300, 129, 128, 2, 260, 77]


def _rows(path):
    with open(path, "w") as f:
        for n in LENS:  # every token a target but the first
            f.write(json.dumps({"input_ids": list(range(1, n + 1)), "loss_mask": [0] + [1] * (n - 1)}) + "\n")


def _json(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("policy", ["truncate", "split"])
def test_plan_of_lengths_says_mask_figures_unknown(tmp_path, policy, monkeypatch):
    _rows(tmp_path / "rows.jsonl")
    (tmp_path / "lens.txt").write_text("\n".join(map(str, LENS)) + "\n")
    flags = ["-C", "128", "--overflow", policy, "--json"]
    plan = _json(["plan", "--lengths", "lens.txt", *flags], tmp_path, monkeypatch)
    dry = _json(["pack", "rows.jsonl", "--dry-run", *flags], tmp_path, monkeypatch)
    packed = _json(["pack", "rows.jsonl", "-o", "out", *flags], tmp_path, monkeypatch)
    assert plan["overflow"]["targets_lost"] is None and plan["changes"]["targets_lost"] is None
    if policy == "truncate":
        assert plan["overflow"]["untrained"] is None and plan["changes"]["sequences_untrained"] is None
    for d in (dry, packed):
        assert isinstance(d["overflow"]["targets_lost"], int) and d["overflow"]["targets_lost"] > 0
        assert d["changes"]["targets_lost"] == d["overflow"]["targets_lost"]
    assert dry["overflow"] == packed["overflow"]
    for k in ("sequences", "chunks", "tokens_dropped", "singletons"):
        assert plan["overflow"][k] == packed["overflow"][k], k
