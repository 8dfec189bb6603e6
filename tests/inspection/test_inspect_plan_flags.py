"""`inspect --plan` with a smaller -C than `plan` used is an error (it printed slabs fuller than
the capacity; the file records the flags now, stranger-test R7), and every plan inspection says
which flags its figures rest on."""
from __future__ import annotations

import numpy as np
from typer.testing import CliRunner

from packtool.cli.app import app

runner = CliRunner()


def _plan(tmp_path, *flags):
    lengths = tmp_path / "lengths.npy"
    np.save(lengths, np.random.default_rng(1).integers(30, 3000, 300))
    plan = tmp_path / "plan.parquet"
    r = runner.invoke(app, ["plan", "--lengths", str(lengths), "-o", str(plan), *flags])
    assert r.exit_code == 0, r.stdout + r.stderr
    return plan


def test_smaller_capacity_than_the_plan_is_refused(tmp_path):
    plan = _plan(tmp_path, "-C", "4096")
    r = runner.invoke(app, ["inspect", "--plan", str(plan), "-C", "2048"])
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.exit_code == 2 and len(lines) == 1, r.stdout + r.stderr
    assert "plan.parquet" in lines[0] and "made with -C 4096" in lines[0] and "Traceback" not in r.stdout


def test_plan_inspection_names_the_flags_it_assumed(tmp_path):
    plan = _plan(tmp_path, "-C", "4096", "--tp", "2")
    r = runner.invoke(app, ["inspect", "--plan", str(plan), "-C", "4096", "--tp", "2"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.stdout + r.stderr
    assert "settings recorded in the plan file: -C 4096 --tp 2 --cp 1" in r.stderr
    r = runner.invoke(app, ["inspect", "--plan", str(plan), "-C", "4096", "--tp", "2", "--json"])
    assert r.exit_code == 0 and r.stdout.lstrip().startswith("{") and "note:" not in r.stdout
