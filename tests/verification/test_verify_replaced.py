"""verify of a local output that another run replaces while verify reads it (S41-2: a
`pack --overwrite` of the same folder): one line saying the output changed under verify (and
which packtool run holds it, when its lock says), exit 2, never a problem list that calls good
shards "truncated" or "edited", nor the old folder's verdict for the new one. Each moment of
the swap: before the shards are read (the finding's), after (an old verdict), and a manifest
rewritten in place; the folders stay byte-identical."""
from __future__ import annotations

import pytest
from replaced_support import MOMENTS, arm, tree, two_outputs
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.errors import PacktoolInputError
from packtool.verification import run as verify_run
from packtool.verification.run import verify


@pytest.fixture
def two(tmp_path):
    return two_outputs(tmp_path)


@pytest.fixture
def during(monkeypatch, two):
    def armed(moment):
        arm(monkeypatch, verify_run, "_run", *two, moment)
        return two
    return armed


@pytest.mark.parametrize("moment", MOMENTS)
def test_library_says_replaced(during, moment):
    a, b = during(moment)
    with pytest.raises(PacktoolInputError) as e:
        verify(a, workers=1)
    msg = str(e.value)
    assert "\n" not in msg and "changed while verify read it" in msg and "run verify again" in msg, msg
    assert ("pack, pid 4242" in msg) == (moment == "swap by a locked pack"), msg
    assert e.value.path == a and msg.count(a) == 1, msg  # the folder named once (it was twice)


@pytest.mark.parametrize("moment", MOMENTS)
def test_cli_one_line_exit_2(during, moment):
    a, b = during(moment)
    r = CliRunner().invoke(app, ["verify", a, "--workers", "1"])
    assert r.exit_code == 2, r.output
    assert "changed while verify read it" in r.output and "Traceback" not in r.output, r.output
    assert "truncated" not in r.output and "FAILED" not in r.output, r.output


def test_untouched_output_still_verifies(two):
    a, _ = two
    before = tree(a)
    assert verify(a, workers=1).ok
    assert tree(a) == before
