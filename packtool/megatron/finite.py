"""A run that diverges stops at the step it does (S38-4): a NaN or inf loss or grad norm ran on to
the end, exit 0, and saved a checkpoint of NaN weights as a success, and the JSON log held a bare
`NaN`, which strict JSON readers (JS `JSON.parse`, Go) refuse. The rules, one place:

- a step whose loss or grad norm is not finite is not applied (the optimizer does not step) and
  ends the run with one line: the step, the values, the learning rate, what was saved;
- weights that are not finite are never saved (a finite loss and grad norm can still step the
  weights to inf: the next step's loss would say so, after a --save-every save);
- the JSON log is strict JSON: a number that is not finite is written as null;
- a checkpoint whose weights are not finite (one saved before these rules) is refused by --load:
  every step of a run on it is NaN, which the line would blame on --lr.

Every rank reaches the same verdict: the loss is all-reduced over DP x CP (and whole on every TP
rank: the vocab-parallel cross-entropy all-reduces its sums), the grad norm over TP after the
gradients are summed, and the weights' count below over TP (DP and CP replicas hold the same
weights), so no rank waits on a collective another has left.
"""
from __future__ import annotations

import json
import math
from typing import Optional

import torch

from packtool.errors import PacktoolConfigError, PacktoolInputError, arg, cli_flag


def json_line(record: dict) -> str:
    """One log line of `record`: strict JSON, a float that is not finite written as null."""
    clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
    return json.dumps(clean, allow_nan=False) + "\n"


def step_is_finite(loss: float, grad_norm: float) -> bool:
    return math.isfinite(loss) and math.isfinite(grad_norm)


def _fix(cfg) -> str:
    return f"lower {arg('lr')} (given {cfg.lr:g}), or give more {arg('warmup')} steps"


def _kept(cfg, saved: Optional[int]) -> str:
    if not cfg.save:
        return "nothing saved"
    if saved is not None:
        return f"the last checkpoint is the one of step {saved} in {cfg.save} (finite weights)"
    return f"nothing written to {arg('save')} {cfg.save} (what it held is left as it was)"


def diverged(step: int, loss: float, grad_norm: float, lr: float, cfg, saved: Optional[int],
             first: bool = False) -> PacktoolConfigError:
    """The one line for a step whose loss or grad norm is not finite; the step is not applied.
    `first`: the run's first step, computed before any update: no learning rate of this run made
    it, so the line does not send the user to --lr."""
    values = f"the loss is {loss:.6g} (grad norm {grad_norm:.6g})"
    if first:
        start = f"the checkpoint of {arg('load', cfg.load)}" if cfg.load else "the model as built"
        return PacktoolConfigError(
            f"train: step {step}: {values} at the run's first step, before any update (not the learning rate's "
            f"doing): {start} gives it on this data; check the model shape's values (such as rope_base); "
            f"{_kept(cfg, saved)}")
    return PacktoolConfigError(
        f"train: step {step}: {values} at learning rate {lr:.3g}: "
        f"the training diverged and stops here, this step not applied; {_fix(cfg)}; {_kept(cfg, saved)}",
        flag=cli_flag("lr"))


def non_finite_weights(params: list[torch.Tensor], info) -> int:
    """How many weights of the model are NaN or inf, summed over the TP group (one sync)."""
    from packtool.megatron.parallel import all_reduce_sum
    if not params:
        return 0
    bad = torch.stack([(~torch.isfinite(p.detach())).sum() for p in params]).sum()
    return int(all_reduce_sum([float(bad)], info.tp_group, info.device)[0])


def check_weights(params: list[torch.Tensor], info, step: int, cfg, saved: Optional[int]) -> None:
    """Before a save: weights that are not finite are refused, not written over a good --save."""
    bad = non_finite_weights(params, info)
    if bad:
        raise PacktoolConfigError(
            f"train: after step {step - 1} the weights hold {bad:,} values that are NaN or inf (the loss "
            f"and grad norm of that step were finite): the training diverged and stops before saving; "
            f"{_fix(cfg)}; {_kept(cfg, saved)}", flag=cli_flag("lr"))


def check_loaded(path: str, ck: dict) -> None:
    """--load, before any model is built: the saved weights and fp32 masters are finite."""
    master = ck["optimizer"].get("master")
    tensors = [*ck["model"].values(), *(master if isinstance(master, list) else [])]
    bad = sum(int((~torch.isfinite(t)).sum()) for t in tensors if torch.is_tensor(t) and t.is_floating_point())
    if bad:
        raise PacktoolInputError(f"holds NaN or inf in {bad:,} of its weight values (saved by a run that diverged): a "
                                 f"run from it trains on NaN loss; give {arg('load')} an earlier checkpoint, or start "
                                 f"without {arg('load')}", path=path, flag=cli_flag("load"))
