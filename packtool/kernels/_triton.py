"""Building and launching the row kernels: autotuned on a GPU, one fixed config in the interpreter.

Kernels are built lazily, at first launch, because triton decides interpreter-or-GPU when `jit` is
applied: building at import would freeze that choice to whatever TRITON_INTERPRET was when some
other module first imported `kernels`.
"""

from __future__ import annotations

import os
from typing import Callable

import triton
from packtool.errors import PacktoolConfigError

# Small enough that the tests' vocabularies (a few hundred) span several blocks and a ragged tail.
INTERPRET_BLOCK_V = 128


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _row_configs(extra: dict[str, tuple]) -> list[triton.Config]:
    # The row kernels stream one logits row per program: the knobs are how much of the row one loop
    # step holds in registers and how many warps share it. Larger blocks amortise the per-step
    # reductions; more warps keep the loads in flight. `extra` adds kernel-specific variants.
    shapes = ((1024, 4), (2048, 8), (4096, 8), (4096, 16), (8192, 16))
    variants = [{}]
    for name, values in extra.items():
        variants = [dict(v, **{name: x}) for v in variants for x in values]
    return [
        triton.Config({"BLOCK_V": b, **v}, num_warps=w) for b, w in shapes for v in variants
    ]


class RowKernel:
    """A row kernel, built on first use for the current mode (GPU or interpreter).

    The vocab width V is a constexpr: it is fixed per model (shard), so specialising on it costs
    one compile, gives the loop a known trip count, and keeps `range(0, V, BLOCK_V)` a Python int
    in the interpreter (triton 3.6's interpreter cannot index with a runtime scalar under numpy 2).
    """

    def __init__(
        self,
        fn: Callable,
        key: list[str],
        restore_value: list[str] | None = None,
        variants: dict[str, tuple] | None = None,
        interpret_defaults: dict | None = None,
    ):
        self._fn = fn
        self._variants = variants or {}
        self._interp_defaults = {"BLOCK_V": INTERPRET_BLOCK_V, **(interpret_defaults or {})}
        self._key = key
        self._restore = restore_value or []
        self._built: dict[bool, object] = {}

    def _get(self, interp: bool):
        if interp not in self._built:
            jitted = triton.jit(self._fn)
            if not interp:
                # restore_value: in-place kernels would otherwise be applied once per timed trial.
                jitted = triton.autotune(
                    configs=_row_configs(self._variants), key=self._key, restore_value=self._restore
                )(jitted)
            self._built[interp] = jitted
        return self._built[interp]

    def __call__(self, grid, *args, **kwargs):
        interp = interpreting()
        kernel = self._get(interp)
        if interp:
            for name, value in self._interp_defaults.items():
                kwargs.setdefault(name, value)
        kernel[grid](*args, **kwargs)


class LazyJit:
    """A kernel with no autotuning, jitted on first launch for the current mode (as RowKernel)."""

    def __init__(self, fn: Callable):
        self._fn, self._built = fn, {}

    def __getitem__(self, grid):
        interp = interpreting()
        if interp not in self._built:
            self._built[interp] = triton.jit(self._fn)
        return self._built[interp][grid]


def check_device(*tensors) -> None:
    """Fail early, naming the fix, when the fused path cannot run on these tensors."""
    for t in tensors:
        if t is not None and t.device.type != "cuda" and not interpreting():
            raise PacktoolConfigError(
                f"fused LM head: tensor on {t.device} needs a CUDA device, or TRITON_INTERPRET=1 "
                "for the (slow) CPU interpreter; use impl='torch' on CPU"
            )
