"""`packtool train` flags that made a run inert or mute without a word (S36-17): a warmup past the
run's last step (the whole run at a fraction of --lr) and --lr 0 each get a note naming the flags
before any work (--steps 0 with nothing saved, and a positive --lr float32 holds as 0, are refused:
test_train_refused_inert.py); --log-every 0 prints the last step (train's result), as every other
--log-every does."""
from __future__ import annotations

import pytest

pytest.importorskip("megatron.core")
pytest.importorskip("typer")
from megatron_runs import TINY, run_cli, small_slabs  # noqa: E402

from packtool import notes  # noqa: E402
from packtool.megatron.loop import TrainConfig, train  # noqa: E402
from packtool.megatron.model import GPTShape  # noqa: E402

SHAPE = GPTShape(layers=1, hidden=32, heads=2, ffn=64, vocab=128)


@pytest.fixture(scope="module")
def slabs(tmp_path_factory):
    return small_slabs(tmp_path_factory.mktemp("c") / "d", fp8="tensorwise")


INERT = {  # the run's flags -> the arguments its note names (None: a run that trains, no note)
    "warmup past --steps": (dict(steps=2, warmup=1000), ("warmup=1000", "steps=2", "0.2%")),
    "warmup past a resumed run's last step": (dict(steps=1, warmup=3, load="{ck}"), ("warmup=3", "step 1")),
    "lr 0": (dict(steps=1, lr=0.0), ("lr=0",)),
    "warmup = steps (reaches the peak)": (dict(steps=2, warmup=2), None),
    "steps 0 with save (the initial checkpoint)": (dict(steps=0, save="{tmp}/init"), None),
}


@pytest.mark.parametrize("case", list(INERT))
def test_an_inert_schedule_is_said_before_any_work(slabs, tmp_path, case):
    kw, said = INERT[case]
    if "load" in kw:
        train(TrainConfig(data_dir=slabs, shape=SHAPE, steps=1, quiet=True, save=str(tmp_path / "ck")))
    kw = {k: v.format(ck=tmp_path / "ck", tmp=tmp_path) if isinstance(v, str) else v for k, v in kw.items()}
    start = notes.mark()
    train(TrainConfig(data_dir=slabs, shape=None if "load" in kw else SHAPE, quiet=True, **kw))
    got = [n for n in notes.since(start) if "trains nothing" in n or "never reaches" in n]
    if said is None:
        assert not got, got
        return
    assert len(got) == 1 and all(w in got[0] for w in said), got


def test_log_every_0_prints_the_last_step(slabs):
    r = run_cli(["train", slabs, *TINY, "--steps", "3", "--log-every", "0"])
    assert r.exit_code == 0, r.output
    steps = [ln.split()[1] for ln in r.stdout.splitlines() if ln.startswith("step ")]
    assert steps == ["2"], r.stdout
