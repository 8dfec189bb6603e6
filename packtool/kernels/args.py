"""The public kernels' tensor arguments, checked before any work: the one owner of that rule.

A wrong argument is one line naming it (as its caller spells it: `packtool.online`'s helpers pass
their batch keys), never torch's or Triton's own words, never a silent cast and never a read past a
tensor's end. The casts and the reads are why: an id tensor is cast to int64 (or to the support's
int32) before the kernels see it, which turns 1.7 into 1 and True into 1 without a word; and a
Triton kernel takes a pointer, not a shape, so a loss mask shorter than the tokens is read past its
end on the GPU. Only metadata is read here (type, dtype, shape, device): no host sync, no copy.
"""

from __future__ import annotations

from numbers import Integral, Real

import torch
from packtool.errors import PacktoolInputError

# ids the kernels widen to int64 exactly; uint64 ids past 2^63 would wrap to negatives
INTEGER_IDS = tuple(getattr(torch, n) for n in ("uint8", "int8", "int16", "int32", "int64", "uint16",
                                                "uint32") if hasattr(torch, n))


def tensor(name: str, t) -> torch.Tensor:
    """t itself, or the error naming `name` when it is no tensor (a list, a numpy array)."""
    if not isinstance(t, torch.Tensor):
        raise PacktoolInputError(f"{name} is a {type(t).__name__}: expected a torch.Tensor")
    return t


def integer_ids(name: str, t, what: str = "token ids") -> torch.Tensor:
    """t, refused unless it holds integers: a float, bool or complex tensor of ids is an error
    before any cast can truncate it."""
    dt = tensor(name, t).dtype
    if dt == getattr(torch, "uint64", None):  # refused by dtype: a value check would cost a host sync
        raise PacktoolInputError(f"{name} is torch.uint64: ids past 2^63-1 would wrap to negatives when widened "
                                 f"to the kernels' int64; pass torch.long (or int32) {what}")
    if dt not in INTEGER_IDS:
        raise PacktoolInputError(f"{name} is {dt}: expected integer {what} (torch.long or int32; "
                                 f"a cast would turn 1.7 or True into id 1)")
    return t


def same_shape(name: str, t, shape, of: str) -> None:
    """`t` (when given) has exactly `shape`, which is `of` (e.g. "hidden's leading shape")."""
    if t is not None and tuple(tensor(name, t).shape) != tuple(shape):
        raise PacktoolInputError(f"{name} {tuple(t.shape)} must match {of} {tuple(shape)}")


def same_device(ref_name: str, ref: torch.Tensor, named: dict) -> None:
    """Every tensor of `named` (name -> tensor or None) lies on ref's device: a CPU tensor beside
    CUDA ones reached Triton as a pointer it cannot read, or torch's 'Expected all tensors...'."""
    for name, t in named.items():
        if t is not None and tensor(name, t).device != ref.device:
            raise PacktoolInputError(f"{name} is on {t.device} but {ref_name} is on {ref.device}: "
                                     f"move it to {ref.device}")


def hidden_and_weight(hidden, weight, weight_shape: str = "[V, H]") -> None:
    """hidden [..., H] and weight [V, H] as tensors of one dtype on one device."""
    tensor("hidden", hidden)
    tensor("weight", weight)
    if hidden.dim() == 0 or weight.dim() != 2 or hidden.shape[-1] != weight.shape[-1]:
        raise PacktoolInputError(f"hidden {tuple(hidden.shape)} and weight {tuple(weight.shape)}: "
                                 f"expected [..., H] and {weight_shape}")
    same_device("hidden", hidden, {"weight": weight})


def support_arguments(hidden, weight, sampled, support, loss_mask) -> tuple:
    """support_logprob's tensors checked; hidden's leading shape, which the others share."""
    hidden_and_weight(hidden, weight, "[V_local, H]")
    lead = hidden.shape[:-1]
    integer_ids("sampled", sampled)
    integer_ids("support", support, "candidate ids")
    if sampled.shape != lead or support.dim() == 0 or support.shape[:-1] != lead:
        raise PacktoolInputError(f"sampled {tuple(sampled.shape)} / support {tuple(support.shape)} must "
                                 f"match hidden's leading shape {tuple(lead)} (support adds K)")
    if support.shape[-1] == 0:  # nothing to normalize over, and no -1 to say "no support"
        raise PacktoolInputError(f"support {tuple(support.shape)} holds K = 0 candidates per token: give "
                                 "each token's candidate ids, -1-padded to one K >= 1 (a row of -1 scores 0)")
    # the checks' Triton pass reads loss_mask by pointer: a shorter one was read past its end
    same_shape("loss_mask", loss_mask, lead, "hidden's leading shape")
    same_device("hidden", hidden, {"sampled": sampled, "support": support, "loss_mask": loss_mask})
    return lead


def temperature(value) -> float:
    """The sampling temperature as a float: a finite number > 0. The torch paths took 0, -1 and
    nan (rows of -inf/nan), inf flattened every row to uniform, and '1' was read as 1.0."""
    number = isinstance(value, Real) and not isinstance(value, bool)
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.dtype.is_complex \
            and value.dtype != torch.bool:
        number, value = True, value.item()
    if not number or not 0 < float(value) < float("inf"):
        raise PacktoolInputError(f"temperature={value!r}: expected a finite number > 0 (the sampler's; 1.0 for none)")
    return float(value)


def count(name: str, value, minimum: int) -> int | None:
    """An integer argument >= minimum, or None (its default): a float was cut (1.5 -> 1), a string
    or a bool reached torch, and 0 or -1 rows per chunk quietly meant the default or 1."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, Integral) or value < minimum:
        raise PacktoolInputError(f"{name}={value!r}: expected an integer >= {minimum}, or None")
    return int(value)
