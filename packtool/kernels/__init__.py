"""Fused LM-head kernels: projection + cross-entropy / log-probs / entropy without storing N x V logits.

`packtool.kernels.lm_head` is the public facade; the other modules hold one Triton kernel each beside a
plain torch reference with the same signature, plus the chunk loop and the tensor-parallel merge.
`packtool.kernels.fp8` holds the FP8 GEMMs of the transformer's linears (torch._scaled_mm + an fp32 reference),
`packtool.kernels.fp8_quant` their Triton quantizers (one read of x writes the operand and its transpose).
`packtool.kernels.support_logprob` scores sampled tokens over the sampler's candidates only (sample-support
replay): a Triton gather-GEMV, or GEMMs when the candidates are a large share of the vocabulary.
"""

import importlib

# the public modules, loaded on first use: importing the package itself loads no torch or triton
_PUBLIC = {"lm_head": "fused LM head", "fp8": "FP8 GEMMs", "fp8_quant": "FP8 quantizers",
           "support_logprob": "sample-support log-probs"}
__all__ = ["lm_head", "fp8", "fp8_quant", "support_logprob"]


def __getattr__(name: str):
    if name in _PUBLIC:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
