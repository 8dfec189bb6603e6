"""Can slabs packed under one alignment be trained under another? (a layout check only)

Training with tp/cp/sp/fp8 needs every segment's padded length to be a multiple of that
setting's per-sequence multiple s (CP zigzag) and every slab a multiple of its per-slab
multiple t (SP split, FP8 tiles). Slabs packed with multiples that are themselves
multiples of those fit; anything else must be re-packed. Both sides come from
`Alignment`, under the manifest's convention.
"""
from __future__ import annotations

from packtool.align import MAX_SLAB_TOKENS, Alignment
from packtool.errors import PacktoolConfigError, arg


def check_training_layout(packed: Alignment, tp: int, cp: int, sp: bool | None,
                          fp8: str) -> None:
    """Refuse (PacktoolConfigError) a layout `packed` does not fit, naming the exact re-pack
    command and the training arguments that fit as they are."""
    # capacity only sizes slabs; the largest allowed keeps Alignment from rejecting it here
    need = Alignment(tp=tp, cp=cp, sp=sp, fp8=fp8, capacity=MAX_SLAB_TOKENS,
                     convention=packed.convention)
    problems = []
    if packed.s % need.s:
        problems.append(f"segments padded to multiples of {packed.s}, training needs {need.s}")
    if packed.t % need.t:
        problems.append(f"slabs padded to multiples of {packed.t}, training needs {need.t}")
    if problems:
        sp_flag = "" if need.sp == (tp > 1) else (" --sp" if need.sp else " --no-sp")
        cap = max(packed.capacity, need.t)
        raise PacktoolConfigError(
            f"slabs were packed for {packed.describe()} (s={packed.s}, t={packed.t}) but "
            f"training runs {need.describe()} (s={need.s}, t={need.t}): "
            + "; ".join(problems)
            + f". Re-pack with `packtool pack ... --tp {tp} --cp {cp}{sp_flag} --fp8 {fp8} "
            f"--max-tokens {cap}`, or train with the packed settings ({arg('tp', packed.tp)}, "
            f"{arg('cp', packed.cp)}, {arg('fp8', packed.fp8)})")
