"""megatron-core consumer of packtool slabs.

Importing this package is cheap: torch and megatron-core load only when one of the names
below is first used (so `packtool train --help` stays fast).
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "PackedSlabDataset": "dataset", "Step": "dataset",
    "PackedCoreAttention": "attention", "cp_all_gather": "attention",
    "SlabSeqParams": "thd", "ThdBatch": "thd", "make_thd_batch": "thd",
    "build_thd_params": "thd",
    "GPTShape": "model", "build_gpt": "model", "token_losses": "model", "loss_sum": "model",
    "hidden_states": "model", "padded_vocab": "model",
    "fp8_linear": "fp8", "Fp8ColumnParallelLinear": "fp8", "Fp8RowParallelLinear": "fp8",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
