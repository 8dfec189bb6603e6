"""inspect of a local output that another run replaces while inspect reads it (a `pack
--overwrite` of the same folder), as verify's S41-2 (tests/verification/test_verify_replaced.py,
the same moments): one line saying the output changed under inspect, naming the packtool run
when its lock says, and to run inspect again; exit 2 with --json and --html, never a report that
mixes the old manifest with the new shards nor a reader's error about good shards, and no HTML
file written. The check is verify's own (packtool.output.unchanged)."""
from __future__ import annotations

import json
import os

import pytest
from replaced_support import MOMENTS, arm, tree, two_outputs
from typer.testing import CliRunner

import packtool
import packtool.slabs.reader as reader
from packtool.cli.app import app
from packtool.errors import PacktoolInputError


@pytest.fixture
def two(tmp_path):
    return two_outputs(tmp_path)


@pytest.fixture
def during(monkeypatch, two):
    def armed(moment):
        arm(monkeypatch, reader, "check_rows", *two, moment)  # what inspect reads the shards with
        return two
    return armed


@pytest.mark.parametrize("moment", MOMENTS)
def test_library_says_replaced(during, moment):
    a, b = during(moment)
    with pytest.raises(PacktoolInputError) as e:
        packtool.inspect(a)
    msg = str(e.value)
    assert "\n" not in msg and "changed while inspect read it" in msg and "run inspect again" in msg, msg
    assert ("pack, pid 4242" in msg) == (moment == "swap by a locked pack"), msg
    assert e.value.path == a and msg.count(a) == 1, msg  # the folder named once (it was twice)


@pytest.mark.parametrize("how", ["--json", "--html"])
@pytest.mark.parametrize("moment", MOMENTS)
def test_cli_one_line_exit_2(during, tmp_path, moment, how):
    a, b = during(moment)
    html = tmp_path / "report.html"
    args = ["--json", "inspect", a] if how == "--json" else ["inspect", a, "--html", str(html)]
    r = CliRunner().invoke(app, args)
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.exit_code == 2 and len(errors) == 1 and "Traceback" not in r.output, r.output
    assert "changed while inspect read it" in errors[0] and "run inspect again" in errors[0], errors
    assert ("pack, pid 4242" in errors[0]) == (moment == "swap by a locked pack"), errors
    if how == "--json":
        got = json.loads(r.stdout.strip().splitlines()[-1])
        assert set(got) == {"error"} and got["error"]["exit_code"] == 2, r.stdout  # no report
    assert not os.path.exists(html)


def test_untouched_output_is_inspected(two, tmp_path):
    a, _ = two
    before = tree(a)
    r = CliRunner().invoke(app, ["inspect", a, "--html", str(tmp_path / "report.html")])
    assert r.exit_code == 0 and os.path.isfile(tmp_path / "report.html"), r.output
    assert packtool.inspect(a).kind == "packed" and tree(a) == before
