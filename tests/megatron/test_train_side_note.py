"""`packtool train` on an output packed with side columns (RL rollouts: log-probs, advantages, a
sampler-support column) trained plain SFT without a word (S37-9). Every way in (the library's
train(), a run resumed with load=, the CLI) and every kind of side column (float32 / float64
values, a K-wide int support column) gets one note naming the columns and docs/RL.md, before
any work; an output without side columns, or a run that trains nothing, gets none."""
from __future__ import annotations

import pytest

pytest.importorskip("megatron.core")
pytest.importorskip("typer")
from megatron_runs import TINY, run_cli  # noqa: E402
from megatron_slabs import greedy_bins, random_sequences, random_side, write_slab_dir  # noqa: E402

from packtool import notes  # noqa: E402
from packtool.align import Alignment  # noqa: E402
from packtool.megatron.loop import TrainConfig, train  # noqa: E402
from packtool.megatron.model import GPTShape  # noqa: E402

SHAPE = GPTShape(layers=1, hidden=32, heads=2, ffn=64, vocab=128)
SIDES = {  # the side columns the output holds (random_side's, by name) -> what the note names
    "float32 values": ("old_logprobs",),
    "float64 values + support": ("returns", "support"),
    "none": (),
}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    align = Alignment(capacity=64)
    seqs = random_sequences(8, 3, 30, seed=3)
    side = random_side(seqs, seed=3)
    bins = greedy_bins(seqs, align)
    root = tmp_path_factory.mktemp("side")
    return {case: str(write_slab_dir(str(root / case.replace(" ", "_")), seqs, bins, align,
                                     side=[s for s in side if s[0].name in names]))
            for case, names in SIDES.items()}


def _library(path, tmp_path, steps):
    train(TrainConfig(data_dir=path, shape=SHAPE, steps=steps, quiet=True))


def _resumed(path, tmp_path, steps):
    train(TrainConfig(data_dir=path, shape=SHAPE, steps=0, quiet=True, save=str(tmp_path / "ck")))
    train(TrainConfig(data_dir=path, load=str(tmp_path / "ck"), steps=steps, quiet=True))


def _cli(path, tmp_path, steps):
    r = run_cli(["train", path, *TINY, "--steps", str(steps), "--log-every", "0",
                 *(["--save", str(tmp_path / "ck")] if not steps else [])])
    assert r.exit_code == 0, r.output


ENTRIES = {"library": _library, "resumed (load=)": _resumed, "cli": _cli}


@pytest.mark.parametrize("entry", list(ENTRIES))
@pytest.mark.parametrize("case", list(SIDES))
def test_side_columns_train_does_not_use_are_noted(outputs, tmp_path, entry, case):
    start = notes.mark()
    ENTRIES[entry](outputs[case], tmp_path, 1)
    got = [n for n in notes.since(start) if "side columns" in n]
    names = SIDES[case]
    if not names:
        assert not got, got
        return
    assert len(got) == 1, got
    assert got[0].startswith(outputs[case]) and "docs/RL.md" in got[0] and "SFT" in got[0], got
    for name in names:
        assert name in got[0], (name, got)
    assert ("(support)" in got[0]) == ("support" in names), got


def test_a_run_that_trains_nothing_says_no_side_note(outputs, tmp_path):
    start = notes.mark()
    _cli(outputs["float32 values"], tmp_path, 0)
    assert not [n for n in notes.since(start) if "side columns" in n]
