"""Model FLOPs for MFU: matmuls on real tokens plus causal attention on real segment lengths.

Per real token, forward+backward of every weight matmul is 6 x (its parameters); the input
embedding is a lookup (no FLOPs), the LM head is a matmul. Causal attention of a segment of
L real tokens costs 2 L^2 d per layer forward (QK^T and PV, halved by the mask), x3 for
training. Pads are never counted: MFU here is useful work only.
"""
from __future__ import annotations

import numpy as np

from packtool.megatron.model import GPTShape

H200_BF16_DENSE = 989e12  # NVIDIA datasheet, dense bf16 (H100/H200 SXM)


def matmul_params(shape: GPTShape) -> int:
    kv = shape.kv_heads or shape.heads
    hd = shape.hidden // shape.heads
    attn = shape.hidden * (shape.heads * hd + 2 * kv * hd) + shape.heads * hd * shape.hidden
    mlp = 3 * shape.hidden * shape.ffn
    return shape.layers * (attn + mlp) + shape.vocab * shape.hidden


def train_flops(shape: GPTShape, seg_real: np.ndarray) -> float:
    seg = np.asarray(seg_real, np.float64)
    d_attn = shape.heads * (shape.hidden // shape.heads)
    return float(6.0 * matmul_params(shape) * seg.sum()
                 + 6.0 * shape.layers * d_attn * np.square(seg).sum())
