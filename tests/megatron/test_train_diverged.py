"""A `packtool train` run that diverges stops at the step it does (S38-4), and --lr is held to what
AdamW can take (S38-5). Before: --lr 1e6 trained on NaN loss to the end, exit 0, saved 1.6M NaN
weights as a success and wrote bare `NaN` into --json-log (not JSON: strict readers refuse it);
--lr 1e308 passed the flag check and died at step 1 as "internal error (a packtool bug)".

The class: every value a step is judged by (its loss, its grad norm), every save of the run
(--save-every, the last), every number of the JSON log, and --lr's range. Each refusal is one
line naming the step and --lr, exit 2, no traceback, nothing saved that is not finite, a
checkpoint already in --save byte-identical."""
from __future__ import annotations

import dataclasses
import json
import math

import pytest

pytest.importorskip("megatron.core")
pytest.importorskip("typer")
from leftover_support import snapshot  # noqa: E402
from megatron_runs import TINY, run_cli, slabs  # noqa: E402,F401  (slabs: a fixture)

from packtool.errors import PacktoolConfigError, spelled_as  # noqa: E402
from packtool.megatron.loop import StepRecord, TrainConfig, train  # noqa: E402
from packtool.megatron.model import GPTShape  # noqa: E402

SHAPE = GPTShape(layers=1, hidden=32, heads=2, ffn=64, vocab=128)


def _strict(text: str):
    """json.loads as JS JSON.parse and Go read it: NaN/Infinity are not JSON."""
    def refuse(name):
        raise ValueError(f"{name} is not JSON")
    return json.loads(text, parse_constant=refuse)


def _cli(args):
    r = run_cli(["train", *args])
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert "Traceback" not in r.output + r.stderr and "internal error" not in r.stderr, r.stderr
    return r, errors


# --- the step's values: a loss or grad norm that is not finite ends the run, the step not applied
NAN, INF = float("nan"), float("inf")
STEP_VALUES = [(NAN, 0.5), (INF, 0.5), (-INF, 0.5), (10.8, NAN), (10.8, INF), (NAN, NAN), (INF, NAN)]


@pytest.mark.parametrize("loss, grad_norm", STEP_VALUES, ids=[f"loss={a},gnorm={b}" for a, b in STEP_VALUES])
def test_a_step_whose_loss_or_grad_norm_is_not_finite_is_refused_naming_the_step_and_lr(loss, grad_norm):
    from packtool.megatron.finite import diverged, step_is_finite
    assert not step_is_finite(loss, grad_norm) and step_is_finite(10.8, 0.5)
    cfg = TrainConfig(data_dir="d", lr=1e6, save="ck")
    with spelled_as({"lr": "--lr", "warmup": "--warmup", "save": "--save"}):
        e = diverged(3, loss, grad_norm, 7.7e5, cfg, None)
    text = str(e)
    assert isinstance(e, PacktoolConfigError) and e.flag == "--lr" and "\n" not in text
    assert "step 3" in text and "--lr" in text and "--save ck" in text and str(loss).lower() in text.lower()


@pytest.mark.parametrize("loss, grad_norm", STEP_VALUES[:2], ids=["loss=nan", "loss=inf"])
def test_a_first_step_not_finite_is_not_blamed_on_lr(loss, grad_norm):
    """The run's first step is computed before any update: no --lr of this run made it."""
    from packtool.megatron.finite import diverged
    cfg = TrainConfig(data_dir="d", lr=1e-3)
    with spelled_as({"lr": "--lr", "warmup": "--warmup", "save": "--save"}):
        text = str(diverged(0, loss, grad_norm, 1e-3, cfg, None, first=True))
    assert "first step, before any update" in text and "lower --lr" not in text and "rope_base" in text, text


# --- the JSON log is strict JSON: every float of a step record
FLOATS = [f.name for f in dataclasses.fields(StepRecord) if f.type in ("float", float)]


@pytest.mark.parametrize("value", [NAN, INF, -INF], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("name", FLOATS)
def test_every_float_of_the_json_log_is_strict_json(name, value):
    from packtool.megatron.finite import json_line
    rec = dataclasses.asdict(StepRecord(step=3, loss=1.0, loss_tokens=5, real_tokens=9, micro_batches=1,
                                        empty_micro_batches=0, grad_norm=0.5, lr=1e-3, seconds=0.1,
                                        tokens_per_s=90.0, mfu=0.01))
    rec[name] = value
    line = json_line(rec)
    assert line.endswith("\n") and line.count("\n") == 1
    assert _strict(line)[name] is None and _strict(line)["step"] == 3


# --- end to end: the finding's run (--lr 1e6), over what --save holds
SAVES = ["no --save", "--save a new folder", "--save holding a checkpoint, --overwrite", "--save-every 1"]


@pytest.mark.parametrize("case", SAVES)
def test_a_diverged_run_exits_2_at_that_step_and_saves_no_nan_weights(slabs, tmp_path, case):
    ck, log = tmp_path / "ck", tmp_path / "log.jsonl"
    extra = []
    if case != "no --save":
        extra = ["--save", str(ck)]
    if "overwrite" in case:
        assert _cli([slabs, *TINY, "--steps", "1", "--save", str(ck)])[0].exit_code == 0
        extra += ["--overwrite"]
    if "every" in case:
        extra += ["--save-every", "1"]
    before = (snapshot(ck) if ck.exists() else None)
    r, errors = _cli([slabs, *TINY, "--steps", "8", "--lr", "1e6", "--json-log", str(log), *extra])
    assert r.exit_code == 2, r.output
    assert len(errors) == 1 and "diverged" in errors[0] and "--lr" in errors[0], r.stderr
    step = int(errors[0].split("step ", 1)[1].split(":")[0])
    lines = [_strict(ln) for ln in log.read_text().splitlines()]  # strict JSON, the failing step's included
    assert [d["step"] for d in lines] == list(range(step + 1))
    assert lines[-1]["loss"] is None or lines[-1]["grad_norm"] is None
    if "every" in case:  # the saves before the divergence are of finite weights, and said
        import torch
        saved = torch.load(ck / "mp_rank_00.pt", weights_only=False)
        assert all(torch.isfinite(v).all() for v in saved["model"].values()
                   if torch.is_tensor(v) and v.is_floating_point())
        assert f"step {saved['step']} in {ck}" in errors[0], errors
    else:
        assert (snapshot(ck) if ck.exists() else None) == before  # absent, or the earlier checkpoint byte for byte


# --- every save: weights stepped to inf by a finite step are never written
@pytest.mark.parametrize("save", ["the last save", "a --save-every save", "over a checkpoint, overwrite"])
def test_weights_that_are_not_finite_are_never_saved(slabs, tmp_path, save):
    ck = tmp_path / "ck"
    if "over" in save:
        train(TrainConfig(data_dir=slabs, shape=SHAPE, steps=1, quiet=True, save=str(ck)))
    before = (snapshot(ck) if ck.exists() else None)
    # a weight decay of 1e300 steps every weight to inf while step 0's loss and grad norm are finite
    kw = dict(steps=2, save_every=1) if "every" in save else dict(steps=1)
    with pytest.raises(PacktoolConfigError, match=r"after step 0 the weights hold [\d,]+ values that are NaN or inf"):
        train(TrainConfig(data_dir=slabs, shape=SHAPE, quiet=True, save=str(ck), weight_decay=1e300,
                          overwrite="over" in save, **kw))
    assert (snapshot(ck) if ck.exists() else None) == before


# --- --lr: what AdamW can hold, before any work
@pytest.mark.parametrize("lr", ["1e308", "3.5e38", "3.403e37", "1e38"])
def test_lr_above_what_adamw_holds_is_refused_before_any_work(slabs, tmp_path, lr):
    r, errors = _cli([slabs, *TINY, "--steps", "3", "--lr", lr, "--save", str(tmp_path / "ck")])
    assert r.exit_code == 2, r.output
    assert len(errors) == 1 and errors[0].startswith("error: --lr must be a finite number from 0 to 3.4e+37"), errors
    assert "step" not in r.stdout and not (tmp_path / "ck").exists()
    with pytest.raises(PacktoolConfigError, match=r"^lr must be a finite number from 0 to 3\.4e\+37"):
        TrainConfig(data_dir="d", lr=float(lr))


def test_the_largest_lr_allowed_runs_or_stops_as_diverged_never_as_a_bug(slabs):
    from packtool.megatron.optim import lr_most
    r, errors = _cli([slabs, *TINY, "--steps", "3", "--lr", repr(lr_most())])
    assert r.exit_code in (0, 2), r.output
    assert r.exit_code == 0 or (len(errors) == 1 and "diverged" in errors[0]), r.stderr
    assert math.isfinite(lr_most())
