"""The arguments of the public kernels and of packtool.online's RL functions over them
(support_logprobs_thd/hf, clipped_policy_loss), checked before any work: the one owner of that rule.

A wrong argument is one line naming it (as its caller spells it: `packtool.online`'s helpers pass
their batch keys), never torch's or Triton's own words, never a silent cast and never a read past a
tensor's end. The casts and the reads are why: an id tensor is cast to int64 (or to the support's
int32) before the kernels see it, which turns 1.7 into 1 and True into 1 without a word; and a
Triton kernel takes a pointer, not a shape, so a loss mask shorter than the tokens is read past its
end on the GPU. Only metadata is read here (type, dtype, shape, device): no host sync, no copy;
the one exception is `segments`, clipped_policy_loss's values, read in one host sync (see there).
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import torch
from packtool.errors import PacktoolInputError, arg

# ids the kernels widen to int64 exactly; uint64 ids past 2^63 would wrap to negatives
INTEGER_IDS = tuple(getattr(torch, n) for n in ("uint8", "int8", "int16", "int32", "int64", "uint16",
                                                "uint32") if hasattr(torch, n))
# what hidden states, weights and log-probs are: an integer hidden was scored, a long log-prob ran
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# The smallest sampling temperature: vLLM (below 1e-5) and SGLang (below 1e-6) decode greedily
# under it rather than scale, and the kernels scale float32 logits by 1/temperature: 1e-38 turned
# logits of a few units into -inf log-probs, 1e-40 (1/T past float32) into +inf and NaN (S42-5).
MIN_TEMPERATURE = 1e-6


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
                                 f"a cast would turn 1.7 or True into 1)")
    return t


def floats(name: str, t, what: str) -> torch.Tensor:
    """t, refused unless it is a floating-point tensor (`what` it holds: "log-probs")."""
    dt = tensor(name, t).dtype
    if dt not in FLOATS:
        raise PacktoolInputError(f"{name} is {dt}: expected floating-point {what} (float32, bfloat16, float16 "
                                 f"or float64)")
    return t


def reals(name: str, t, what: str, bool_ok: bool = False) -> torch.Tensor:
    """t, refused unless it holds real numbers (integers or floats; bools where `bool_ok`)."""
    dt = tensor(name, t).dtype
    if dt.is_complex or (dt == torch.bool and not bool_ok) or (dt not in FLOATS and dt not in INTEGER_IDS
                                                               and dt != torch.bool):
        raise PacktoolInputError(f"{name} is {dt}: expected {what} as real numbers (a float or integer tensor"
                                 f"{', or bool' if bool_ok else ''})")
    return t


def same_shape(name: str, t, shape, of: str) -> None:
    """`t` (when given) has exactly `shape`, which is `of` (e.g. "hidden's leading shape")."""
    if t is not None and tuple(tensor(name, t).shape) != tuple(shape):
        raise PacktoolInputError(f"{name} {tuple(t.shape)} must match {of} {tuple(shape)}")


def same_device(ref_name: str, ref: torch.Tensor, named: dict) -> None:
    """Every tensor of `named` (name -> tensor or None) lies on ref's device: a CPU tensor beside
    CUDA ones reached Triton as a pointer it cannot read, or torch's 'Expected all tensors...'."""
    for name, t in named.items():
        if ref.device.type == "meta":  # "move it to meta" was the advice: nothing computes there
            raise PacktoolInputError(f"{ref_name} is on the meta device, which holds no values: pass it on the "
                                     f"device that computes (cpu or cuda)")
        if t is not None and tensor(name, t).device != ref.device:
            raise PacktoolInputError(f"{name} is on {t.device} but {ref_name} is on {ref.device}: "
                                     f"move it to {ref.device}")


def hidden_and_weight(hidden, weight, weight_shape: str = "[V, H]") -> None:
    """hidden [..., H] and weight [V, H] as floating-point tensors on one device."""
    floats("hidden", hidden, "hidden states")
    floats("weight", weight, "weights")
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


def number(name: str, value, low: float, high: float, *, high_open: bool = True, note: str = "") -> float:
    """A real number argument in [low, high) ([low, high] unless high_open), finite, as a float:
    a Python or numpy number or a one-element real tensor; a bool or a str ('1') is no number."""
    ok = isinstance(value, Real) and not isinstance(value, bool)
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.dtype.is_complex \
            and value.dtype != torch.bool:
        ok, value = True, value.item()
    x = float(value) if ok else math.nan
    if not (math.isfinite(x) and low <= x and (x < high if high_open else x <= high)):
        span = f">= {low:g}" if high == math.inf else f"in [{low:g}, {high:g}{')' if high_open else ']'}"
        raise PacktoolInputError(f"{name}={value!r}: expected a finite number {span}{note}")
    return x


def temperature(value) -> float:
    """The sampling temperature as a float: a finite number >= MIN_TEMPERATURE. The torch paths took
    0, -1 and nan (rows of -inf/nan), inf flattened every row to uniform, '1' was read as 1.0, and
    a tiny one overflowed the scaled float32 logits (log-probs of +inf and NaN, S42-5)."""
    return number("temperature", value, MIN_TEMPERATURE, math.inf,
                  note=" (the sampler's; 1.0 for none): samplers decode greedily below it, and the "
                       "kernels' float32 logits / temperature overflow toward inf and NaN")


def switches(**values) -> list:
    """True/False keywords, in the order given: 'no' or 0 were read by truth (bool('no') is True)."""
    for name, value in values.items():
        if not isinstance(value, bool):
            raise PacktoolInputError(f"{name}={value!r}: expected True or False")
    return list(values.values())


CALLER = "@caller"  # the spelling key (errors.spelled_as) a wrapper names itself under


def caller() -> str:
    """'support_logprobs_hf: ' while a wrapper that spelled CALLER calls, else '': a message that
    names two of its arguments says whose they are once."""
    said = arg(CALLER)
    return "" if said == CALLER else f"{said}: "


def flat_views(**tensors) -> dict:
    """The spelling (errors.spelled_as) of the per-token tensors a kernel reads as flat [N] or
    [N, K] views (`support`: the one with K), as expressions of what the caller passed: its checks
    name row n of the view, which is `support.flatten(0, -2)[n]` of a [B, T, K] support."""
    flat = {}
    for name, t in tensors.items():
        k = name == "support"
        if t is not None and t.dim() != 1 + k:
            flat[name] = f"{arg(name)}.flatten({'0, -2' if k else ''})"
    return flat


def choice(name: str, value, choices: tuple) -> str:
    if not isinstance(value, str) or value not in choices:
        raise PacktoolInputError(f"{name}={value!r}: expected one of {', '.join(map(repr, choices))}")
    return value


def count(name: str, value, minimum: int) -> int | None:
    """An integer argument >= minimum, or None (its default): a float was cut (1.5 -> 1), a string
    or a bool reached torch, and 0 or -1 rows per chunk quietly meant the default or 1."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.dtype in INTEGER_IDS:
        value = int(value.item())  # an all-reduced count, as a one-element integer tensor
    if isinstance(value, bool) or not isinstance(value, Integral) or value < minimum:
        raise PacktoolInputError(f"{name}={value!r}: expected an integer >= {minimum}, or None")
    return int(value)


def _at(name: str, t: torch.Tensor, i: int) -> str:
    """Element i of t's flat view, as an expression of the tensor the caller passed."""
    return f"{name}[{i}]" if t.dim() == 1 else f"{name}.flatten()[{i}]"


def policy_tensors(logprobs, old_logprobs, advantages, loss_weight, segment, seg_loss_tokens) -> tuple:
    """clipped_policy_loss's tensors checked, flat: (lp, old, adv, w, seg_loss_tokens as float32,
    segment as int64), one value per local position (seg_loss_tokens: one per segment)."""
    floats("logprobs", logprobs, "log-probs")
    floats("old_logprobs", old_logprobs, "log-probs")
    reals("advantages", advantages, "advantages")
    reals("loss_weight", loss_weight, "loss weights", bool_ok=True)
    integer_ids("segment", segment, "segment indices")
    reals("seg_loss_tokens", seg_loss_tokens, "loss-token counts")  # the batches' are float32 sums of weights
    same_device("logprobs", logprobs, {"old_logprobs": old_logprobs, "advantages": advantages,
                                       "loss_weight": loss_weight, "segment": segment,
                                       "seg_loss_tokens": seg_loss_tokens})
    flat = [x.reshape(-1) for x in (logprobs, old_logprobs, advantages, loss_weight, segment)]
    if len({x.shape for x in flat}) != 1:
        raise PacktoolInputError(f"logprobs, old_logprobs, advantages, loss_weight and segment must hold one value "
                                 f"per local position, got {[tuple(x.shape) for x in flat]}")
    lp, old, adv, w = (x.float() for x in flat[:4])
    # index_add takes int64 (or int32) indices only: the narrower integers are widened
    return lp, old, adv, w, seg_loss_tokens.reshape(-1).float(), flat[4].long()


def segments(segment, seg_loss_tokens, seg, counts, w, num_loss_tokens, num_sequences) -> None:
    """clipped_policy_loss's values that its sums index by or divide by, held to the batch: every
    position's segment is a row of seg_loss_tokens (an index past it was torch's IndexError on CPU
    and a device-side assert, which ends the CUDA context, on a GPU), every count is >= 0, no
    segment's loss_weight sums to more on this rank than its count over all ranks says (a count
    of 0 divided 4 tokens' loss by 1), and the step's num_loss_tokens / num_sequences are at least
    this micro-batch's (0 or -3 gave -8 for -1 a token). One host sync reads the verdicts (tens of
    microseconds per micro-batch beside a step of seconds; the kernels' hot path has none); the
    first bad value is then found and named."""
    n_seg = counts.numel()
    outside = (seg < 0) | (seg >= n_seg)
    local = torch.zeros(n_seg, dtype=torch.float64, device=seg.device)
    if n_seg:  # clamped: an index outside is refused below, before any sum uses it
        local.index_add_(0, seg.clamp(0, n_seg - 1), w.to(torch.float64))
    bad = ~(counts >= 0)  # NaN too
    over = local > counts.double() * (1 + 1e-5) + 1e-5  # float32 sums of the same weights, summed apart
    v = torch.stack([outside.any().double(), bad.any().double(), over.any().double(), counts.double().sum(),
                     (counts > 0).sum().double()]).tolist()  # the one host sync
    if v[0]:
        p = int(outside.nonzero()[0])
        raise PacktoolInputError(
            f"{_at('segment', segment, p)} = {int(seg[p])}, but seg_loss_tokens holds {n_seg} segment"
            f"{'s' * (n_seg != 1)} (indices 0..{n_seg - 1}): pass the same batch's segment and seg_loss_tokens")
    if v[1]:
        i = int(bad.nonzero()[0])
        raise PacktoolInputError(f"{_at('seg_loss_tokens', seg_loss_tokens, i)} = {float(counts[i]):g}: expected "
                                 f"counts >= 0 (each segment's loss tokens)")
    if v[2]:
        i = int(over.nonzero()[0])
        raise PacktoolInputError(
            f"{_at('seg_loss_tokens', seg_loss_tokens, i)} = {float(counts[i]):g}, but the loss_weight of segment "
            f"{i} sums to {float(local[i]):g} here: pass the batch's seg_loss_tokens (each segment's loss tokens "
            f"over all CP ranks)")
    if num_loss_tokens is not None and num_loss_tokens < v[3] - 1e-3:
        raise PacktoolInputError(
            f"num_loss_tokens={num_loss_tokens}, but this micro-batch alone holds {v[3]:g} loss tokens (the sum "
            f"of seg_loss_tokens): pass the step's count (Step.global_loss_tokens()), or None for the "
            f"micro-batch's")
    if num_sequences is not None and num_sequences < v[4]:
        raise PacktoolInputError(
            f"num_sequences={num_sequences}, but {v[4]:g} segments of this micro-batch alone hold loss tokens: "
            f"pass the step's count, or None for the micro-batch's")
