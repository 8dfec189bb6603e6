"""RB-6: `plan --json` said the figures only the loss masks hold (targets lost at the cuts,
truncate's sequences cut to no target) as null, but `inspect --plan FILE --json` of the same plan
said 0, and where no row was cut `plan` said null where 0 is certain. One rule now
(planning.summary.unknown_figures) for {plan --json, inspect --plan --json} and both tables:
null / `?` where a row was cut, 0 where none was."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from packtool.cli.app import app

LENS = {"cut": [5, 40, 300, 129], "none cut": [5, 40, 60]}
MASKS = {"truncate": ("targets_lost", "untrained"), "split": ("targets_lost",)}


def _run(args):
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    return r.stdout


@pytest.mark.parametrize("cut", LENS)
@pytest.mark.parametrize("policy", MASKS)
@pytest.mark.parametrize("door", ["plan --json", "inspect --plan --json", "plan table", "inspect --plan table"])
def test_mask_figures_are_unknown_where_a_row_was_cut_and_0_where_none_was(tmp_path, monkeypatch, door, policy, cut):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lens.txt").write_text("\n".join(map(str, LENS[cut])) + "\n")
    flags = ["--lengths", "lens.txt", "-C", "128", "--overflow", policy]
    json_out = "--json" in door
    if door.startswith("plan"):
        out = _run(["plan", *flags, *(["--json"] if json_out else [])])
    else:
        _run(["plan", *flags, "-o", "p.parquet"])
        out = _run(["inspect", "--plan", "p.parquet", "--no-what-if", *(["--json"] if json_out else [])])
    known = cut == "none cut"
    if json_out:
        o = json.loads(out.strip().splitlines()[-1])["overflow"]
        assert (o["sequences"] == 0) == known, o
        for k in MASKS[policy]:
            assert o[k] == (0 if known else None), (k, o)
    else:
        text = " ".join(out.replace("│", " ").split())
        assert ("targets lost ?" in text) != known, text
        assert ("targets lost 0" in text) == known, text
