"""A `packtool train` run that could do nothing at all is refused before any work, as kind config,
one line naming the flag and the fix (S40-6, S40-10). Before: `--steps 0` without `--save` built
the model and exited 0 with a line phrased as an error; a positive `--lr` that float32 holds as 0
(1e-320) trained nothing, weights identical to `--lr 0`, without the note `--lr 0` gets.

The class: every value of the run's flags that makes the run train and save nothing (steps 0 with
no save; lr from the smallest positive double up to float32's smallest normal number), through
the CLI (exit 2, one line, nothing built, nothing written) and the
library (TrainConfig, PacktoolConfigError); the legal neighbours (lr 0, lr float32's tiny, steps 0
with --save) still run."""
from __future__ import annotations

import pytest

pytest.importorskip("megatron.core")
pytest.importorskip("typer")
import torch  # noqa: E402
from leftover_support import snapshot  # noqa: E402
from megatron_runs import TINY, run_cli as _run, slabs  # noqa: E402,F401  (slabs: a fixture)

from packtool.errors import PacktoolConfigError  # noqa: E402
from packtool.megatron.loop import TrainConfig  # noqa: E402

F32_TINY = float(torch.finfo(torch.float32).tiny)
REFUSED = {  # the flags -> (the flag named, the library's arguments)
    "steps 0, no save": (["--steps", "0"], "--steps", dict(steps=0)),
    "steps 0, --lr 0, no save": (["--steps", "0", "--lr", "0"], "--steps", dict(steps=0, lr=0.0)),
    "lr 1e-320 (the finding)": (["--steps", "2", "--lr", "1e-320"], "--lr", dict(steps=2, lr=1e-320)),
    "lr 5e-324 (smallest double)": (["--steps", "1", "--lr", "5e-324"], "--lr", dict(steps=1, lr=5e-324)),
    "lr 1e-45 (float32 subnormal)": (["--steps", "1", "--lr", "1e-45"], "--lr", dict(steps=1, lr=1e-45)),
    "lr just below float32 tiny": (["--steps", "1", "--lr", repr(F32_TINY * 0.99)], "--lr",
                                   dict(steps=1, lr=F32_TINY * 0.99)),
}




@pytest.mark.parametrize("case", list(REFUSED))
def test_a_run_that_does_nothing_is_refused_before_any_work(slabs, tmp_path, case):
    flags, flag, _ = REFUSED[case]
    log = tmp_path / "log.jsonl"
    save = [] if "steps 0" in case else ["--save", str(tmp_path / "ck")]
    before = snapshot(slabs)
    r = _run(["train", slabs, *TINY, *flags, *save, "--json-log", str(log)])
    assert r.exit_code == 2, r.output
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {flag} ") and "give" in errors[0], r.stderr
    assert "Traceback" not in r.output and "GPTModel" not in r.output and "step" not in r.stdout, r.output
    assert not log.exists() and not (tmp_path / "ck").exists() and snapshot(slabs) == before


@pytest.mark.parametrize("case", list(REFUSED))
def test_the_library_refuses_the_same(case):
    _, flag, kw = REFUSED[case]
    with pytest.raises(PacktoolConfigError, match=rf"^{flag[2:]}\b"):
        TrainConfig(data_dir="d", **kw)


@pytest.mark.parametrize("kw", [dict(lr=0.0), dict(lr=F32_TINY), dict(lr=1e-30, steps=1), dict(steps=0, save="ck")],
                         ids=["lr 0 (a note)", "lr float32 tiny", "lr 1e-30", "steps 0 with save"])
def test_the_legal_neighbours_are_taken(kw):
    TrainConfig(data_dir="d", **kw)
