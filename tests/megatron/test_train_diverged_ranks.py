"""A diverged run stops on every rank at the same step (S38-4), never one rank raising while the
others wait in the next step's collective: each rank judges the same values (the loss all-reduced
over DP x CP, the grad norm over TP, the weights' non-finite count over TP; finite.py). Two gloo
ranks on CPU for DP=2, TP=2 and CP=2: a --lr 1e6 run with --save-every 1 (its saves before the
divergence are of finite weights), and a weight decay that steps every weight to inf (the save's
check). Each rank must raise the same one line; none may hang or finish."""
from __future__ import annotations

import pytest

pytest.importorskip("megatron.core")
from megatron_slabs import greedy_bins, random_sequences, write_slab_dir  # noqa: E402
from spawned_ranks import join_gloo, spawn_ranks  # noqa: E402

from packtool.align import Alignment  # noqa: E402

LAYOUTS = {"dp2": dict(tp=1, cp=1), "tp2": dict(tp=2, cp=1), "cp2": dict(tp=1, cp=2)}
CASES = [("dp2", "lr"), ("tp2", "lr"), ("cp2", "lr"), ("tp2", "weights")]


def _worker(rank, init, data, layout, case, save, out):
    from packtool.megatron.loop import TrainConfig, train
    from packtool.megatron.model import GPTShape
    join_gloo(rank, 2, init)
    kw = dict(lr=1e6, steps=8) if case == "lr" else dict(weight_decay=1e300, steps=2)
    try:
        train(TrainConfig(data_dir=data, shape=GPTShape(layers=1, hidden=32, heads=2, ffn=64, vocab=128),
                          sp=False, quiet=True, save=save, save_every=1, **LAYOUTS[layout], **kw))
        said = "finished"
    except Exception as e:  # noqa: BLE001  (the test compares what each rank raised)
        said = f"{type(e).__name__}: {e}"
    with open(f"{out}.{rank}", "w") as f:
        f.write(said)


@pytest.mark.parametrize("layout, case", CASES, ids=[f"{a}-{b}" for a, b in CASES])
def test_every_rank_stops_at_the_same_step_with_the_same_line(tmp_path, layout, case):
    align = Alignment(capacity=64, **LAYOUTS[layout])
    seqs = random_sequences(24, 3, 30, seed=8)
    data = str(write_slab_dir(str(tmp_path / "d"), seqs, greedy_bins(seqs, align), align))
    out, save = str(tmp_path / "said"), str(tmp_path / "ck")
    codes = spawn_ranks(_worker, 2, (str(tmp_path / "init"), data, layout, case, save, out))
    hung = [r for r, c in enumerate(codes) if c is None]
    assert not hung, f"ranks {hung} still running: one rank left a collective the other waits in"
    said = [open(f"{out}.{r}").read() for r in range(2)]
    assert said[0] == said[1], said
    assert said[0].startswith("PacktoolConfigError: train: "), said
    assert ("diverged and stops here" if case == "lr" else "weights hold") in said[0], said
