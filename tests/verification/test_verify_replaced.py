"""verify of a local output that another run replaces while verify reads it (S41-2: a
`pack --overwrite` of the same folder): one line saying the output changed under verify (and
which packtool run holds it, when its lock says), exit 2, never a problem list that calls good
shards "truncated" or "edited", nor the old folder's verdict for the new one. Each moment of
the swap: before the shards are read (the finding's), after (an old verdict), and a manifest
rewritten in place; the folders stay byte-identical."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from slab_support import write_pack
from typer.testing import CliRunner

from packtool.align import Alignment
from packtool.cli.app import app
from packtool.errors import PacktoolInputError
from packtool.output.lock import lock_file
from packtool.slabs.names import MANIFEST
from packtool.verification import run as verify_run
from packtool.verification.run import verify

ALIGN = Alignment(cp=2, capacity=256)


def _tree(d):
    out = {}
    for root, _, names in os.walk(d):
        for n in names:
            p = os.path.join(root, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, d)] = f.read()
    return out


@pytest.fixture
def two(tmp_path):
    a, _ = write_pack(str(tmp_path / "a"), np.arange(5, 250, 7), ALIGN, seed=0)
    b, _ = write_pack(str(tmp_path / "b"), np.arange(9, 250, 5), ALIGN, seed=3)
    return a, b


def _swap(a, b):
    os.rename(a, a + ".old")
    os.rename(b, a)


def _rewrite_manifest(a, b):
    tmp = os.path.join(a, MANIFEST + ".tmp")
    with open(os.path.join(a, MANIFEST)) as f:
        man = json.load(f)
    with open(tmp, "w") as f:
        json.dump(man, f, indent=1)  # same content, a new file: what an atomic rewrite leaves
    os.replace(tmp, os.path.join(a, MANIFEST))


MOMENTS = ["swap before the shards", "swap after the shards", "manifest rewritten", "swap by a locked pack"]


@pytest.fixture
def during(monkeypatch, two):
    def arm(moment):
        a, b = two
        real = verify_run._run

        def run(jobs, workers, advance=lambda n: None):
            if moment == "swap after the shards":
                res = real(jobs, workers, advance)
                _swap(a, b)
                return res
            if moment == "manifest rewritten":
                _rewrite_manifest(a, b)
            else:
                _swap(a, b)
                if moment == "swap by a locked pack":
                    with open(lock_file(os.path.realpath(a)), "wb") as f:
                        f.write(b"packtool lock, pid 4242, pack\n")
            return real(jobs, workers, advance)
        monkeypatch.setattr(verify_run, "_run", run)
        return a, b
    return arm


@pytest.mark.parametrize("moment", MOMENTS)
def test_library_says_replaced(during, moment):
    a, b = during(moment)
    with pytest.raises(PacktoolInputError) as e:
        verify(a, workers=1)
    msg = str(e.value)
    assert "\n" not in msg and "changed while verify read it" in msg and "run verify again" in msg, msg
    assert ("pack, pid 4242" in msg) == (moment == "swap by a locked pack"), msg
    assert e.value.path == a


@pytest.mark.parametrize("moment", MOMENTS)
def test_cli_one_line_exit_2(during, moment):
    a, b = during(moment)
    r = CliRunner().invoke(app, ["verify", a, "--workers", "1"])
    assert r.exit_code == 2, r.output
    assert "changed while verify read it" in r.output and "Traceback" not in r.output, r.output
    assert "truncated" not in r.output and "FAILED" not in r.output, r.output


def test_untouched_output_still_verifies(two):
    a, _ = two
    before = _tree(a)
    assert verify(a, workers=1).ok
    assert _tree(a) == before
