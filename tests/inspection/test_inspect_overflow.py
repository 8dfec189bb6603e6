"""inspect reports a packed output's overflow figures from its manifest, held to the slabs
wherever the slabs hold them: every figure planning's OVERFLOW_FIGURES gives the policy, as
planning's `overflow_of_segments` counts it again (split: sequences cut, chunks; singleton:
sequences and singleton slabs), and the loss masks' figures where the slabs bound them (split's
targets lost: one per cut at most, L6). truncate's are not in the slabs: reported as recorded."""
from __future__ import annotations

import numpy as np
import pytest
from slab_support import read_manifest, resign_changes, save_manifest, write_pack

from packtool.align import Alignment
from packtool.errors import PacktoolError
from packtool.inspection.packed import inspect_packed
from packtool.planning.core import OVERFLOW_FIGURES, PackingConfig

LENGTHS = np.random.default_rng(5).integers(1, 40, 60) * 8 - 3
LENGTHS[[3, 17, 40]] = [300, 800, 290]  # over U=256 (800: its targets, past a third, all past U)
CASES = [(p, k) for p in ("split", "singleton", "truncate") for k in OVERFLOW_FIGURES[p]]


@pytest.fixture(scope="module")
def packs(tmp_path_factory):
    root = tmp_path_factory.mktemp("overflow")
    return {p: write_pack(str(root / p), LENGTHS, Alignment(capacity=256), PackingConfig("bfd", overflow=p))[0]
            for p in ("split", "singleton", "truncate")}


@pytest.mark.parametrize("policy,figure", CASES, ids=[f"{p}-{k}" for p, k in CASES])
def test_an_overflow_figure_the_slabs_do_not_give_is_refused(packs, tmp_path, policy, figure):
    import shutil
    out = str(tmp_path / "p")
    shutil.copytree(packs[policy], out)
    assert getattr(inspect_packed(out, what_if=False).overflow, figure) > 0  # the clean output, exercised
    man = read_manifest(out)
    st = man["stats"]["overflow"]
    # split's targets lost: the slabs bound them by the cuts (a cut on a prompt token loses none)
    st[figure] = st["chunks"] - st["sequences"] + 1 if (policy, figure) == ("split", "targets_lost") else st[figure] + 1
    resign_changes(man)  # the figure alone is caught by every reader's manifest check (slabs/declared.py)
    save_manifest(out, man)
    if policy == "truncate":  # what a cut removed is in no slab: the manifest's word, as recorded
        assert getattr(inspect_packed(out, what_if=False).overflow, figure) == man["stats"]["overflow"][figure]
        return
    with pytest.raises(PacktoolError) as e:
        inspect_packed(out, what_if=False)
    assert f"stats.overflow.{figure}" in str(e.value), str(e.value)


# S41-11: a figure the policy cannot produce at all (stats.overflow.sequences 5 under `error`),
# or another policy named in the block, is verify's `manifest_declared` problem; inspect showed
# it as what pack did. Every policy, every figure outside OVERFLOW_FIGURES[policy], and the name.
POLICIES = ("error", "split", "singleton", "truncate")
FIGURES = ("sequences", "chunks", "targets_lost", "tokens_dropped", "singletons", "untrained")
OFF = [(p, k) for p in POLICIES for k in FIGURES if k not in OVERFLOW_FIGURES[p]] + [(p, "policy") for p in POLICIES]


@pytest.fixture(scope="module")
def every_policy(tmp_path_factory, packs):
    root = tmp_path_factory.mktemp("every")
    fits = LENGTHS[LENGTHS <= 256]  # `error` refuses a row over U
    return {**packs, "error": write_pack(str(root / "error"), fits, Alignment(capacity=256),
                                         PackingConfig("bfd", overflow="error"))[0]}


@pytest.mark.parametrize("policy,figure", OFF, ids=[f"{p}-{k}" for p, k in OFF])
def test_an_overflow_figure_the_policy_cannot_produce_is_refused(every_policy, tmp_path, policy, figure):
    import json
    import shutil

    from typer.testing import CliRunner

    from packtool.cli.app import app
    from packtool.verification.run import verify
    out = str(tmp_path / "p")
    shutil.copytree(every_policy[policy], out)
    man = read_manifest(out)
    man["stats"]["overflow"][figure] = "split" if figure == "policy" and policy != "split" else (
        "error" if figure == "policy" else 5)
    save_manifest(out, man)
    before = open(f"{out}/.manifest.json", "rb").read()
    assert not verify(out, workers=1).ok  # verify's manifest_declared rejects it
    with pytest.raises(PacktoolError) as e:
        inspect_packed(out, what_if=False)
    msg = str(e.value)
    assert "\n" not in msg and f"stats.overflow.{figure}" in msg and "packtool verify" in msg, msg
    r = CliRunner().invoke(app, ["inspect", out, "--json"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert json.loads(r.stdout)["error"]["message"] == msg
    assert open(f"{out}/.manifest.json", "rb").read() == before
