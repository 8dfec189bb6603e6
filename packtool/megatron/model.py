"""megatron-core GPTModel with packtool's THD core attention, and its LM-head loss.

The model is megatron-core's own `GPTModel` built from `get_gpt_layer_local_spec()`
(megatron's ColumnParallel/RowParallel linears, so TP and SP come from megatron), with
one substitution: `core_attention = PackedCoreAttention`. Llama-style shape: RMSNorm,
SwiGLU, no biases, RoPE, untied output layer.

CPU. Two things stop megatron-core 0.16.1 from running on a CPU-only torch, both narrow:
  - `RotaryEmbedding.get_emb` moves `inv_freq` to `torch.cuda.current_device()` on its
    first call (only with rope='megatron'; packtool's default RoPE never builds it).
    `cpu_rope` replaces that method on the model's RotaryEmbedding instance (not the class)
    with the same computation minus the device move. Nothing else in the GPT forward path
    touches CUDA when dropout is 0 and SP is off.
  - weights are created with `use_cpu_initialization=True`, and the CUDA RNG tracker
    (`model_parallel_cuda_manual_seed`) is only seeded on CUDA.
"""
from __future__ import annotations

import math
import types
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch
import torch.nn.functional as F
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.models.gpt.gpt_model import GPTModel
from megatron.core.transformer.transformer_block import TransformerBlockSubmodules
from megatron.core.transformer.transformer_config import TransformerConfig

from packtool.errors import PacktoolConfigError, PacktoolInputError, arg, bad_choice
from packtool.integers import INT32_MAX, int_value, short
from packtool.params import torch_device
from packtool.megatron.attention import PackedCoreAttention
from packtool.megatron.fused import rms_norm
from packtool.megatron.thd import ThdBatch


@dataclass(frozen=True)
class GPTShape:
    layers: int
    hidden: int
    heads: int
    ffn: int
    vocab: int  # padded vocabulary (see padded_vocab)
    kv_heads: Optional[int] = None
    max_seq: int = 8192
    rope_base: int = 10000

    def __post_init__(self) -> None:
        # checked here, before a model is built: megatron met a bad shape as a ZeroDivisionError,
        # a shape mismatch or a float multiplying a list (exit 3), and rope_base <= 0 trained on NaN
        for name in ("layers", "hidden", "heads", "ffn", "vocab", "max_seq", "kv_heads"):
            object.__setattr__(self, name, int_value(name, getattr(self, name), 1, INT32_MAX,
                                                     optional=name == "kv_heads", error=PacktoolConfigError))
        object.__setattr__(self, "rope_base", positive_real("rope_base", self.rope_base))
        if self.rope_base < 1:  # 1e-300 passed and trained on NaN: RoPE's frequencies overflow float32
            raise PacktoolConfigError(f"{arg('rope_base')} must be at least 1 (RoPE's base: below 1 each "
                                      f"frequency is above 1 radian per token, and a tiny one overflows float32 "
                                      f"into NaN loss), got {self.rope_base!r}")
        if self.hidden % self.heads:
            raise PacktoolConfigError(f"{arg('heads', self.heads)} must divide {arg('hidden', self.hidden)} "
                                      f"(each head takes hidden/heads channels): give a divisor of {self.hidden}")
        if self.kv_heads is not None and self.heads % self.kv_heads:
            raise PacktoolConfigError(f"{arg('kv_heads', self.kv_heads)} must divide {arg('heads', self.heads)} "
                                      f"(query heads share each KV head): give a divisor of {self.heads}")

    def params(self) -> int:
        """Parameter count (embedding + output layer + blocks)."""
        kv = self.kv_heads or self.heads
        hd = self.hidden // self.heads
        attn = self.hidden * (self.heads * hd + 2 * kv * hd) + self.heads * hd * self.hidden
        mlp = 3 * self.hidden * self.ffn
        return 2 * self.vocab * self.hidden + self.layers * (attn + mlp + 2 * self.hidden) + self.hidden


def positive_real(name: str, value, zero: bool = False) -> float:
    """A finite real number above 0 (or at least 0 with `zero`): inf or NaN trained on NaN loss
    for the whole run and exited 0; a bool is not a number here."""
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    if not (ok and math.isfinite(value) and (value >= 0 if zero else value > 0)):
        least = "at least 0" if zero else "above 0"
        raise PacktoolConfigError(f"{arg(name)} must be a finite number {least}, got {short(value)}")
    return value


class PackedRMSNorm(torch.nn.RMSNorm):
    """torch RMSNorm usable with sequence parallelism. megatron-core's `WrappedTorchNorm`
    asserts SP off (its SP-capable norms are Apex/TE, absent here); an RMSNorm over a token
    shard is correct as long as its weight gradient is summed over TP, which
    `parallel.reduce_grads` does for parameters marked `sequence_parallel` (megatron's mark)."""

    def __init__(self, config: TransformerConfig, hidden_size: int, eps: float = 1e-5, **_: Any):
        super().__init__(hidden_size, eps=eps)
        self.weight.sequence_parallel = bool(config.sequence_parallel)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # one fused kernel on CUDA instead of torch's pow/mean/rsqrt/mul chain (fused.py)
        return rms_norm(x, self.weight, self.eps)


def padded_vocab(vocab_size: int, tp: int = 1, multiple: int = 128) -> int:
    """Megatron pads the vocabulary so each TP shard is a multiple of `multiple`."""
    m = multiple * tp
    return -(-vocab_size // m) * m


def transformer_config(shape: GPTShape, dtype: torch.dtype, device: str, tp: int = 1,
                       cp: int = 1, sp: bool = False) -> TransformerConfig:
    on_cpu = torch_device("device", device).type == "cpu"  # torch.device('cpu') or 'cpu:0' is the CPU too
    return TransformerConfig(
        num_layers=shape.layers, hidden_size=shape.hidden, num_attention_heads=shape.heads,
        num_query_groups=shape.kv_heads, ffn_hidden_size=shape.ffn,
        normalization="RMSNorm", gated_linear_unit=True, activation_func=F.silu,
        add_bias_linear=False, hidden_dropout=0.0, attention_dropout=0.0,
        # megatron's jit-scripted SwiGLU / bias-dropout-add: GPU only (CPU runs unfused)
        bias_activation_fusion=not on_cpu, bias_dropout_fusion=not on_cpu,
        bf16=dtype == torch.bfloat16, params_dtype=dtype,
        use_cpu_initialization=on_cpu, perform_initialization=True,
        tensor_model_parallel_size=tp, context_parallel_size=cp, sequence_parallel=sp,
        masked_softmax_fusion=False, apply_rope_fusion=False,
        gradient_accumulation_fusion=False, persist_layer_norm=False,
        cross_entropy_loss_fusion=False)


def _get_emb_no_cuda(self: Any, max_seq_len: int, offset: int = 0) -> torch.Tensor:
    # RotaryEmbedding.get_emb of megatron-core 0.16.1 without its move of inv_freq to
    # torch.cuda.current_device(); the rest is the same computation.
    freqs = self.get_freqs_non_repeated(max_seq_len, offset)
    if not self.rotary_interleaved:
        emb = torch.cat((freqs, freqs), dim=-1)
    else:
        emb = torch.stack((freqs.view(-1, 1), freqs.view(-1, 1)), dim=-1).view(
            freqs.shape[0], -1)
    return emb[:, None, None, :]


def cpu_rope(model: GPTModel) -> GPTModel:
    rope = getattr(model, "rotary_pos_emb", None)
    if rope is not None:
        rope.get_emb = types.MethodType(_get_emb_no_cuda, rope)
    return model


def build_gpt(shape: GPTShape, device: str = "cpu", dtype: torch.dtype = torch.float32,
              tp: int = 1, cp: int = 1, sp: bool = False, seed: int = 0,
              pg_collection: Any = None, rope: str = "packtool", fp8: str = "none") -> GPTModel:
    """GPTModel with PackedCoreAttention. Needs megatron's parallel_state initialized
    (or an explicit pg_collection).

    rope='megatron': megatron's own THD RoPE (position_embedding_type='rope'), which loops
    over segments in Python and syncs the GPU (`cu_seqlens.tolist()`) twice per layer.
    rope='packtool' (default): the same rotation (same inv_freq, rotate-half form) applied in
    PackedCoreAttention from the micro-batch's positions-in-segment (CP zigzag included),
    computed once per micro-batch; GPTModel is built with position_embedding_type='none'.
    The weights are identical either way (RoPE has none); a test checks both agree.

    fp8='tensorwise'|'blockwise': the four linears of every layer run FP8 GEMMs
    (packtool/megatron/fp8.py); the embedding, norms, attention and LM head do not."""
    device = torch_device("device", device)  # at the call: a bad one was torch's error mid-build
    if rope not in ("packtool", "megatron"):
        raise bad_choice(PacktoolConfigError, "rope", rope, ("packtool", "megatron"))
    torch.manual_seed(seed)
    if device.type != "cpu":
        from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed
        model_parallel_cuda_manual_seed(seed)
    cfg = transformer_config(shape, dtype, device, tp=tp, cp=cp, sp=sp)
    layer = get_gpt_layer_local_spec(normalization="RMSNorm")
    layer.submodules.self_attention.submodules.core_attention = PackedCoreAttention
    layer.submodules.input_layernorm = PackedRMSNorm
    layer.submodules.pre_mlp_layernorm = PackedRMSNorm
    if fp8 != "none":
        from packtool.megatron.fp8 import apply_to_layer_spec, check_shape
        kv = shape.kv_heads or shape.heads
        check_shape(fp8, shape.hidden, shape.ffn, (shape.heads + 2 * kv) * cfg.kv_channels, tp)
        apply_to_layer_spec(layer, fp8)
    spec = TransformerBlockSubmodules(layer_specs=[layer] * shape.layers,
                                      layer_norm=PackedRMSNorm)
    kw = {} if pg_collection is None else {"pg_collection": pg_collection}
    model = GPTModel(cfg, spec, vocab_size=shape.vocab, max_sequence_length=shape.max_seq,
                     position_embedding_type="rope" if rope == "megatron" else "none",
                     rotary_base=shape.rope_base,
                     share_embeddings_and_output_weights=False, parallel_output=True, **kw)
    if device.type == "cpu":
        cpu_rope(model)
    else:
        model = model.to(device)
    if rope == "packtool":
        d = cfg.kv_channels  # megatron RotaryEmbedding's inv_freq, rotary_percent 1.0
        model.packtool_inv_freq = 1.0 / (shape.rope_base ** (
            torch.arange(0, d, 2, dtype=torch.float32, device=device) / d))
        model.packtool_rope_key = key = RopeKey()  # a deepcopy of the model gets its own, shared inside it
        for m in model.modules():
            if isinstance(m, PackedCoreAttention):
                m.rope_key = key
    # every call of the model sets the rotation its core attention applies, the documented
    # `model(ids, position_ids, None, packed_seq_params=...)` included: attached only by
    # hidden_states(), a plain call ran with no RoPE at all and trained a position-blind model
    model.register_forward_pre_hook(_rope_for_call, with_kwargs=True)
    return model


def _call_arg(args: tuple, kwargs: dict, i: int, name: str) -> Any:
    return args[i] if len(args) > i else kwargs.get(name)


class RopeKey:
    """Names one build_gpt model's rotation on a micro-batch's params (SlabSeqParams.rope): its
    PackedCoreAttention modules apply the entry of their model's key and no other."""

    __slots__ = ()


def _rope_for_call(model: GPTModel, args: tuple, kwargs: dict) -> None:
    """Forward pre-hook: packtool's RoPE from this call's position_ids onto its params under the
    model's key, computed once per micro-batch and model (kept while the same positions come
    again: activation recompute in backward reads it there)."""
    p = _call_arg(args, kwargs, 6, "packed_seq_params")
    rotations = getattr(p, "rope", None)
    key, inv = getattr(model, "packtool_rope_key", None), getattr(model, "packtool_inv_freq", None)
    if not isinstance(rotations, dict) or key is None or inv is None:
        return  # not packtool's THD params (refused by PackedCoreAttention), or rope='megatron' (rotates itself)
    pos, ids = _call_arg(args, kwargs, 1, "position_ids"), _call_arg(args, kwargs, 0, "input_ids")
    if not isinstance(pos, torch.Tensor) or pos.shape != getattr(ids, "shape", pos.shape) or pos.dim() != 2:
        got = f"shape {list(pos.shape)}" if isinstance(pos, torch.Tensor) else short(pos)
        raise PacktoolInputError(f"position_ids must be the micro-batch's [1, t] positions in segment "
                                 f"(mb.position_ids, the shape of input_ids): a build_gpt(rope='packtool') model "
                                 f"rotates queries and keys by them, got {got}")
    dtype, held = model.config.params_dtype, rotations.get(key)
    if held is not None and held[2] is pos and held[0].device == pos.device and held[0].dtype == dtype:
        return
    freqs = pos[0].to(torch.float32)[:, None] * inv.to(pos.device)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)[:, None, :]
    rotations[key] = emb.cos().to(dtype), emb.sin().to(dtype), pos


@contextmanager
def _hidden_only(model: GPTModel):
    # GPTModel._postprocess returns the decoder output (after the final norm) when
    # post_process is False; the LM head then runs here, fused or not.
    saved = model.post_process
    model.post_process = False
    try:
        yield
    finally:
        model.post_process = saved


def hidden_states(model: GPTModel, batch: ThdBatch) -> torch.Tensor:
    """Decoder output [t_local(/tp with SP), 1, hidden]."""
    with _hidden_only(model):
        return model(batch.input_ids, batch.position_ids, None,
                     packed_seq_params=batch.params)


def token_losses(model: GPTModel, batch: ThdBatch) -> torch.Tensor:
    """Per-token cross-entropy [1, t_local] through megatron's own output layer and
    vocab-parallel cross-entropy (the 'torch' LM head)."""
    h = hidden_states(model, batch)
    logits, _ = model.output_layer(h)
    return model.compute_language_model_loss(batch.labels, logits.float())


def loss_sum(model: GPTModel, batch: ThdBatch, impl: str = "torch",
             tp_group: Any = None) -> torch.Tensor:
    """sum_i weight_i * CE_i over the micro-batch's local tokens (a scalar).

    impl='torch': megatron's output layer + vocab_parallel_cross_entropy.
    impl='fused': packtool.kernels.lm_head.fused_linear_cross_entropy (chunked Triton LM head; the
    logits are never stored). With SP the hidden states are gathered over TP first, and the
    vocab-sharded weight goes with tp_group."""
    if impl == "torch":
        return (token_losses(model, batch) * batch.loss_weight).sum()
    if impl != "fused":
        raise bad_choice(PacktoolConfigError, "lm_head", impl, ("fused", "torch"))
    from packtool.kernels.lm_head import fused_linear_cross_entropy
    h = hidden_states(model, batch)
    sp = bool(model.config.sequence_parallel)
    if sp:
        # gather the token shards; the head then returns its vocab shard's partial
        # grad_hidden (reduce_grad_hidden=False) and the gather's backward reduce-scatters it
        from megatron.core.tensor_parallel import gather_from_sequence_parallel_region
        h = gather_from_sequence_parallel_region(h, tensor_parallel_output_grad=True,
                                                 group=tp_group)
    tp = model.config.tensor_model_parallel_size
    return fused_linear_cross_entropy(h[:, 0], model.output_layer.weight, batch.labels[0],
                                      batch.loss_weight[0], reduction="sum", impl="fused",
                                      tp_group=tp_group if tp > 1 else None,
                                      reduce_grad_hidden=not sp)
