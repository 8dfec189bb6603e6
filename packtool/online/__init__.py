"""packtool inside RL/SFT trainers, every step: in-memory lengths -> bins for DP ranks
(`step`), a drop-in for SkyRL's SeqPacker (`skyrl`), worker-side token-budget micro-batches
(`microbatch`), packed micro-batch tensors from in-memory token and side-column tensors
(`packed`, needs torch; `thd` wraps them in megatron's THD batch, needs megatron-core; both
loaded on first use), a PPO/GRPO clipped loss on packed batches (`rl`, torch), sampler-support log-probs of
packed batches (`support`, torch + packtool/kernels/) and the numba
cache warm-up (`warmup`).

Importing this package loads numpy and numba only (no pyarrow, rich or torch).
"""
from __future__ import annotations

import importlib

from packtool.online.step import ALGORITHMS, OnlinePackError, StepBins, StepPacker, as_lengths, pack_step

_LAZY = {
    "SeqPacker": "skyrl", "FirstFitDecreasing": "skyrl", "Balanced": "skyrl",
    "PackingStrategy": "skyrl", "make_seq_packer": "skyrl",
    "MicroBatches": "microbatch", "micro_batches": "microbatch",
    "thd_batch": "thd", "thd_batches": "thd",
    "pack_tensors": "packed", "PackedTensors": "packed",
    "clipped_policy_loss": "rl", "PolicyLoss": "rl",
    "support_logprobs_thd": "support", "support_logprobs_hf": "support",
    "warm_cache": "warmup",
}

# thd's names load torch and megatron-core, packed's and rl's torch: attributes, not `import *`
__all__ = sorted(["ALGORITHMS", "OnlinePackError", "StepBins", "StepPacker", "as_lengths",
                  "pack_step", *(k for k, v in _LAZY.items() if v not in ("thd", "packed", "rl", "support"))])


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
