"""stranger32 S32-13: every `warning:` (rows skipped, sequences truncated or split, NaN/inf side
values) and every `note:` of verify's report is said on stderr with the notes, never inside the result on stdout, which a job keeps as
its result file or sends to /dev/null. --json carries them in its fields as before."""
from __future__ import annotations

import dataclasses
import io
import json

import pytest
from rich.console import Console
from typer.testing import CliRunner

from packtool.align import Alignment
from packtool.cli.app import app
from packtool.cli.printing import print_plan_summary
from packtool.planning.core import PackingConfig, plan
from packtool.planning.summary import plan_summary

runner = CliRunner()


def _summary(kind: str):
    policy = kind if kind in ("split", "truncate") else "singleton"
    s = plan_summary(plan([3, 40, 5], Alignment(capacity=16), PackingConfig(overflow=policy)))
    if kind == "skipped":
        s = dataclasses.replace(s, skipped_rows={"empty": 2, "all_masked": 1})
    if kind == "nonfinite":
        s = dataclasses.replace(s, side_nonfinite={"lp": {"nan": 1, "inf": 2, "first": {
            "file": "in.parquet", "row": 0, "token": 2, "value": "nan"}}})
    return s


WANT = {"split": "split into", "truncate": "token(s) dropped", "skipped": "row(s) skipped",
        "nonfinite": "side column lp holds 1 NaN"}


@pytest.mark.parametrize("kind", sorted(WANT))
def test_each_warning_kind_goes_to_stderr(kind, capsys):
    out = io.StringIO()
    print_plan_summary(_summary(kind), Console(file=out, width=200))
    err = capsys.readouterr().err
    assert "warning" not in out.getvalue(), out.getvalue()
    said = [ln for ln in err.splitlines() if ln.startswith("warning: ")]
    assert len(said) == 1 and WANT[kind] in said[0], err


@pytest.mark.parametrize("policy", ["split", "truncate"])
def test_the_command_keeps_stdout_the_result(policy, tmp_path):
    (tmp_path / "l.txt").write_text("3\n40\n5\n")
    args = ["plan", "--lengths", str(tmp_path / "l.txt"), "-C", "16", "--overflow", policy]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.stdout + r.stderr
    assert "warning" not in r.stdout and WANT[policy] in r.stderr, (r.stdout, r.stderr)
    j = runner.invoke(app, [*args, "--json"])  # the JSON object stays the whole of stdout
    assert json.loads(j.stdout)["changes"]["sequences_" + ("split" if policy == "split" else "truncated")] == 1


@pytest.mark.parametrize("ok", [True, False])
def test_a_verify_report_note_goes_to_stderr(ok, capsys):
    from packtool.cli.printing import print_verify_report
    from packtool.verification.run import VerifyReport
    r = VerifyReport(directory="out", ok=ok, shards=1, slabs=2, physical_tokens=8, real_tokens=6, loss_tokens=3,
                     source_checked=False, seconds=0.1, counts={} if ok else {"schema": 1}, problems=[],
                     notes=["whole-output checks skipped"])
    out = io.StringIO()
    print_verify_report(r, Console(file=out, width=200))
    err = capsys.readouterr().err
    assert "note" not in out.getvalue() and "out: 1 shard(s)" in out.getvalue(), out.getvalue()
    assert "note: whole-output checks skipped\n" in err, err
