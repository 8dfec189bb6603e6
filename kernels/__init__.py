"""Fused LM-head kernels: projection + cross-entropy / log-probs / entropy without storing N x V logits.

`kernels.lm_head` is the public facade; the other modules hold one Triton kernel each beside a
plain torch reference with the same signature, plus the chunk loop and the tensor-parallel merge.
`kernels.fp8` holds the FP8 GEMMs of the transformer's linears (torch._scaled_mm + an fp32 reference),
`kernels.fp8_quant` their Triton quantizers (one read of x writes the operand and its transpose).
`kernels.support_logprob` scores sampled tokens over the sampler's candidates only (sample-support
replay): a Triton gather-GEMV, or GEMMs when the candidates are a large share of the vocabulary.
"""

# the public modules; importing the package itself loads no torch or triton
__all__ = ["lm_head", "fp8", "fp8_quant", "support_logprob"]
