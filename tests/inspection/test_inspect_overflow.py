"""inspect reports a packed output's overflow figures from its manifest, held to the slabs
wherever the slabs hold them: every figure planning's OVERFLOW_FIGURES gives the policy, as
planning's `overflow_of_segments` counts it again (split: sequences cut, chunks, targets lost;
singleton: sequences and singleton slabs). truncate's are not in the slabs: reported as recorded."""
from __future__ import annotations

import numpy as np
import pytest
from slab_support import read_manifest, save_manifest, write_pack

from packtool.align import Alignment
from packtool.errors import PacktoolError
from packtool.inspection.packed import inspect_packed
from packtool.planning.core import OVERFLOW_FIGURES, PackingConfig

LENGTHS = np.random.default_rng(5).integers(1, 40, 60) * 8 - 3
LENGTHS[[3, 17, 40]] = [300, 420, 290]  # over U=256
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
    man["stats"]["overflow"][figure] += 1
    save_manifest(out, man)
    if policy == "truncate":  # what a cut removed is in no slab: the manifest's word, as recorded
        assert getattr(inspect_packed(out, what_if=False).overflow, figure) == man["stats"]["overflow"][figure]
        return
    with pytest.raises(PacktoolError) as e:
        inspect_packed(out, what_if=False)
    assert f"stats.overflow.{figure}" in str(e.value), str(e.value)
