"""THD core attention for megatron-core's GPTModel, without TransformerEngine.

megatron-core 0.16.1's own `DotProductAttention` rejects packed (THD) input and context
parallelism; the TE module that accepts both is not installed on our machines. This module
is a drop-in `core_attention` for `get_gpt_layer_local_spec()`: same constructor, same
forward signature, THD only.

Causality is per segment and bottom-right aligned: a query chunk of length q attending
k >= q keys sees key `i + k - q` and everything before it. With context parallelism each
rank holds chunks r and 2cp-1-r of every segment (layout.cp_chunk_ranges); K/V are
all-gathered over the CP group (backward reduce-scatters their gradients) and each local
chunk j attends the keys of chunks 0..j of its segment. The key index that picks those
keys out of the gathered tensor is built once per micro-batch on the host (`thd.py`).

Kernels: on CUDA `torch.nn.attention.varlen.varlen_attn(..., window_size=(-1, 0))`
(flash attention; its default window is NOT causal). torch 2.13's CPU build has the
function but no CPU kernel (`_flash_attention_forward` is CUDA only), so CPU runs use
per-chunk `scaled_dot_product_attention` with an explicit bottom-right causal mask.
Pad positions (layout pad, tail pad, fill) sit at the end of their physical segment, so
causal attention over the padded segments never lets a real token see a pad.
"""
from __future__ import annotations

import functools
import inspect
import math
from typing import Any, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from megatron.core.transformer.module import MegatronModule
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.utils import divide

from packtool.errors import PacktoolConfigError, PacktoolInputError
from packtool.megatron.fused import rope


class _AllGatherDim0(torch.autograd.Function):
    """all_gather along dim 0 over a torch process group; backward reduce-scatters (sums)
    the gradient so every rank gets the total gradient of its own K/V rows."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
        ctx.group = group
        world = dist.get_world_size(group)
        out = torch.empty((world * x.shape[0],) + tuple(x.shape[1:]), dtype=x.dtype,
                          device=x.device)
        dist.all_gather_into_tensor(out, x.contiguous(), group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        world = dist.get_world_size(ctx.group)
        out = torch.empty((grad.shape[0] // world,) + tuple(grad.shape[1:]), dtype=grad.dtype,
                          device=grad.device)
        dist.reduce_scatter_tensor(out, grad.contiguous(), group=ctx.group)
        return out, None


def cp_all_gather(x: torch.Tensor, group: Any) -> torch.Tensor:
    """Concatenate every CP rank's `x` along dim 0, rank order, with autograd.

    `group` is a torch ProcessGroup, or any object with `size()`, `rank()` and an
    autograd-aware `all_gather(x)` (the tests' in-process CP simulation)."""
    if isinstance(group, dist.ProcessGroup):
        return _AllGatherDim0.apply(x, group)
    return group.all_gather(x)


@functools.lru_cache(maxsize=1)
def _varlen():
    """Causal varlen_attn: torch > 2.10 spells causal window_size=(-1, 0) (the default
    (-1, -1) is full attention); torch 2.10 had is_causal=True."""
    from torch.nn.attention.varlen import varlen_attn
    if "window_size" in inspect.signature(varlen_attn).parameters:
        return functools.partial(varlen_attn, window_size=(-1, 0))
    return functools.partial(varlen_attn, is_causal=True)


def _sdpa_chunks(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_q: list[int],
                 cu_k: list[int], scale: float) -> torch.Tensor:
    """Reference path: one SDPA call per (query chunk, key range), bottom-right causal."""
    outs = []
    for i in range(len(cu_q) - 1):
        qs, qe, ks, ke = cu_q[i], cu_q[i + 1], cu_k[i], cu_k[i + 1]
        nq, nk = qe - qs, ke - ks
        if nq == 0:
            continue
        qi = q[qs:qe].transpose(0, 1)  # [h, nq, d]
        ki = k[ks:ke].transpose(0, 1)
        vi = v[ks:ke].transpose(0, 1)
        # query row a sits at key position a + nk - nq (bottom-right alignment)
        rows = torch.arange(nq, device=q.device)[:, None] + (nk - nq)
        mask = torch.arange(nk, device=q.device)[None, :] <= rows
        o = F.scaled_dot_product_attention(qi, ki, vi, attn_mask=mask, scale=scale)
        outs.append(o.transpose(0, 1))
    return torch.cat(outs, 0) if outs else q.new_zeros(q.shape)


class PackedCoreAttention(MegatronModule):
    """`core_attention` submodule for `SelfAttention` on THD micro-batches built by
    `packtool.megatron.thd.build_thd_params` (a `PackedSeqParams` with packtool's extra
    fields). The constructor matches megatron-core's `DotProductAttention`."""

    def __init__(self, config: TransformerConfig, layer_number: int, attn_mask_type: Any,
                 attention_type: str, attention_dropout: Optional[float] = None,
                 softmax_scale: Optional[float] = None, cp_comm_type: Optional[str] = None,
                 pg_collection: Any = None):
        super().__init__(config=config)
        dropout = config.attention_dropout if attention_dropout is None else attention_dropout
        if dropout:
            raise PacktoolConfigError(f"attention_dropout={dropout}: PackedCoreAttention has no "
                             f"dropout; set attention_dropout=0.0 in the model config")
        if config.window_size is not None:
            raise PacktoolConfigError("window_size: sliding-window attention is not supported by PackedCoreAttention; "
                                      "unset window_size in the model config")
        self.model_cp = int(getattr(config, "context_parallel_size", 1) or 1)
        self.layer_number = max(1, layer_number)
        head_dim = config.kv_channels
        self.softmax_scale = (1.0 / math.sqrt(head_dim) if softmax_scale is None
                              else softmax_scale)
        tp = 1 if pg_collection is None else pg_collection.tp.size()
        self.heads_per_partition = divide(config.num_attention_heads, tp)

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                attention_mask: Any, attn_mask_type: Any = None, attention_bias: Any = None,
                packed_seq_params: Any = None) -> torch.Tensor:
        p = packed_seq_params
        if p is None or getattr(p, "qkv_format", None) != "thd" or not hasattr(p, "attn_cu_q"):
            raise PacktoolInputError("PackedCoreAttention needs THD input: pass packed_seq_params "
                             "from packtool.megatron.thd.build_thd_params (qkv_format='thd')")
        if attention_bias is not None:
            raise PacktoolInputError("attention_bias is not supported by PackedCoreAttention: pass attention_bias=None")
        if p.cp_size != self.model_cp:  # a cp=1 batch on a CP model: every rank ran the whole slab, a gradient of cp x
            raise PacktoolConfigError(
                f"the micro-batch was made for cp_size={p.cp_size}, the model for context_parallel_size="
                f"{self.model_cp}: pass the training CP where the batches are made (PackedSlabDataset's cp_rank, "
                f"cp_size, cp_group: ps.get_context_parallel_rank(), _world_size(), _group())")
        # query [t, np, hn]; key/value [t, ng, hn] (megatron squeezes the batch dim for THD)
        own = getattr(self, "rope_key", None)  # set by build_gpt(rope='packtool'); a user's own GPTModel has none
        if own is not None:  # packtool's RoPE (model.py): positions within segments, this model's
            held = getattr(p, "rope", {}).get(own)
            if held is None:
                raise PacktoolInputError(
                    "packtool's RoPE for this model is not on the micro-batch's packed_seq_params: call the "
                    "model itself (model(ids, position_ids, None, packed_seq_params=...)), whose pre-hook "
                    "computes it from position_ids; a layer called alone would run position-blind")
            query, key = rope(query, key, held[0], held[1])
        if p.cp_size > 1:
            if p.cp_group is None:  # half of each segment's keys are on another rank: none to ask
                raise PacktoolConfigError(
                    f"the micro-batch holds CP rank {p.cp_rank}'s chunks of each segment (made for cp_size="
                    f"{p.cp_size}) but no cp_group to gather the other ranks' keys from: pass cp_group (your CP "
                    f"group, e.g. ps.get_context_parallel_group()) where the batch is made, or cp_size=1 to "
                    f"train without context parallelism")
            key = cp_all_gather(key, p.cp_group).index_select(0, p.kv_index)
            value = cp_all_gather(value, p.cp_group).index_select(0, p.kv_index)
        if key.shape[1] != query.shape[1]:
            # GQA: torch 2.11's varlen_attn has no enable_gqa (TypeError on an H200, 2026-12-01)
            rep = query.shape[1] // key.shape[1]
            key = key.repeat_interleave(rep, dim=1)
            value = value.repeat_interleave(rep, dim=1)
        if query.is_cuda:
            out = _varlen()(query, key, value, p.attn_cu_q, p.attn_cu_k, p.attn_max_q,
                            p.attn_max_k, scale=self.softmax_scale)
        else:
            out = _sdpa_chunks(query, key, value, p.attn_cu_q_host, p.attn_cu_k_host,
                               self.softmax_scale)
        return out.reshape(out.shape[0], -1)
