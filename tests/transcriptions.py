"""Plain transcriptions of the framework functions that packtool's conventions cite.

Kept in the tests, written apart from packtool/align.py, so the grid test compares two
independent readings of the same source. Each block keeps the source's own names, branch
structure and config inputs; a small adapter at the end of each block maps packtool's
(tp, cp, sp, fp8) onto that framework's config and returns (per-sequence multiple, packed
multiple). Sources were read from stored public GitHub code (file, function, commit cited).
"""
from __future__ import annotations

import math

# --- SkyRL ----------------------------------------------------------------------------
# dyurk-lila/SkyRL@7c5f069bb7367277c6b82f2f1fc737270cdeb77f (the PR #2108 branch,
# "perf(train): make sequence packing alignment-aware"), file
# skyrl/backends/skyrl_train/distributed/megatron/packing_utils.py: _fp8_token_align,
# get_packing_align_size_sequence, get_packing_align_size_total, packed_segment_layout;
# is_mxfp8_recipe from .../megatron/quantization_utils.py (NovaSky-AI/SkyRL@1d1dccc).
# Note: a variant stored at NovaSky-AI/SkyRL@0d1f5c8 has the same two names but a recipe-less
# total (lcm(layout_align, 16*cp_size)); it cannot give SkyRL's own test value
# get_packing_align_size_total(4, 1, fp8_enabled=True) == 512, the one DESIGN's table uses.


def skyrl_is_mxfp8_recipe(fp8_recipe) -> bool:
    return isinstance(fp8_recipe, str) and fp8_recipe.strip().lower() == "mxfp8"


def skyrl_fp8_token_align(tp_size: int, cp_size: int, fp8_recipe) -> int:
    if skyrl_is_mxfp8_recipe(fp8_recipe):
        return 32 * tp_size * cp_size
    if tp_size > 1:
        return 128 * tp_size * cp_size
    return 16 * cp_size


def skyrl_get_packing_align_size_sequence(tp_size: int, cp_size: int) -> int:
    if tp_size < 1 or cp_size < 1:
        raise ValueError(f"tp_size and cp_size must be positive, got tp_size={tp_size}, cp_size={cp_size}")
    if cp_size > 1:
        return tp_size * cp_size * 2
    return 1


def skyrl_get_packing_align_size_total(tp_size: int, cp_size: int, fp8_enabled: bool = False,
                                       fp8_recipe=None) -> int:
    if tp_size < 1 or cp_size < 1:
        raise ValueError(f"tp_size and cp_size must be positive, got tp_size={tp_size}, cp_size={cp_size}")
    if cp_size > 1:
        layout_align = tp_size * cp_size * 2
    else:
        layout_align = tp_size
    if not fp8_enabled:
        return layout_align
    return math.lcm(layout_align, skyrl_fp8_token_align(tp_size, cp_size, fp8_recipe))


def skyrl_packed_segment_layout(sequence_lengths, *, tp_size, cp_size, fp8_enabled=False,
                                fp8_recipe=None) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(padded_lengths, cu_seqlens_padded) of one packed slab, as SkyRL lays it out."""
    sequence_align = skyrl_get_packing_align_size_sequence(tp_size, cp_size)
    total_align = skyrl_get_packing_align_size_total(tp_size, cp_size, fp8_enabled=fp8_enabled,
                                                     fp8_recipe=fp8_recipe)
    padded = []
    for raw_length in sequence_lengths:
        length = int(raw_length)
        if length <= 0:
            raise ValueError(f"Packed sub-sequence lengths must be positive, got {length}")
        padded.append(length + (-length % sequence_align))
    if not padded:
        return (), (0,)
    padded[-1] += -sum(padded) % total_align
    offsets = [0]
    for length in padded:
        offsets.append(offsets[-1] + length)
    return tuple(padded), tuple(offsets)


def skyrl(tp: int, cp: int, sp: bool, fp8: str) -> tuple[int, int]:
    # SkyRL takes tp_size, cp_size, fp8_enabled and the recipe string; it has no SP switch.
    fp8_enabled = fp8 != "none"
    seq = skyrl_get_packing_align_size_sequence(tp, cp)
    total = skyrl_get_packing_align_size_total(tp, cp, fp8_enabled=fp8_enabled,
                                               fp8_recipe=fp8 if fp8_enabled else None)
    return seq, math.lcm(seq, total)


# --- NeMo-RL --------------------------------------------------------------------------
# NVIDIA-NeMo/RL nemo_rl/models/megatron/data.py: _get_pack_sequence_parameters_for_megatron
# (the version taking pad_individual_seqs_to_multiple_of = policy.make_sequence_length_
# divisible_by and asserting it is a multiple of get_parallel_token_alignment), with
# get_fp8_token_alignment / get_parallel_token_alignment from NeMo-RL's shared
# "Token-alignment requirements shared by Megatron data paths" module, and
# _pack_sequences_for_megatron's cu_seqlens_padded rule. Older versions
# (nemo_rl/models/megatron/common.py@07fee340d79f66d8edbaa360672be006666a28c6 and
# data.py@856cc5b956f8fc94c6e00b2bc3fbda5c71e78b09) computed the same with
# `divisor = 128 if use_blockwise_fp8 else 16` (mxfp8 then got 16, not 32) and fixed
# pad_individual_seqs_to_multiple_of at the parallel alignment.


def nemo_rl_round_up_to_multiple(value: int, multiple: int) -> int:
    return ((value + multiple - 1) // multiple * multiple) if value % multiple != 0 else value


def nemo_rl_get_fp8_token_alignment(megatron_cfg) -> int:
    fp8_cfg = megatron_cfg.get("fp8_cfg") or {}
    if not fp8_cfg.get("enabled", False):
        return 1
    if fp8_cfg["fp8_recipe"] == "blockwise":
        return 128
    if fp8_cfg["fp8_recipe"] == "mxfp8":
        return 32
    return 16


def nemo_rl_get_parallel_token_alignment(megatron_cfg) -> int:
    cp_size = megatron_cfg["context_parallel_size"]
    tp_size = megatron_cfg["tensor_model_parallel_size"]
    return (2 * cp_size if cp_size > 1 else 1) * (
        tp_size if tp_size > 1 and megatron_cfg["sequence_parallel"] else 1
    )


def nemo_rl_get_pack_sequence_parameters_for_megatron(megatron_cfg, pad_individual_seqs_to_multiple_of,
                                                      max_seq_len_in_batch):
    tp_size = megatron_cfg["tensor_model_parallel_size"]
    sp = megatron_cfg["sequence_parallel"]
    pp_size = megatron_cfg["pipeline_model_parallel_size"]
    cp_size = megatron_cfg["context_parallel_size"]
    minimum_pad_factor = nemo_rl_get_parallel_token_alignment(megatron_cfg)
    assert pad_individual_seqs_to_multiple_of % minimum_pad_factor == 0
    divisor = nemo_rl_get_fp8_token_alignment(megatron_cfg)
    if (megatron_cfg.get("moe_token_dispatcher_type") == "flex"
            and megatron_cfg.get("moe_flex_dispatcher_backend") == "hybridep"):
        divisor = max(divisor, 128)
    if divisor > 1:
        pad_packed_seq_to_multiple_of = divisor
        if cp_size > 1:
            pad_packed_seq_to_multiple_of *= cp_size * 2
        if tp_size > 1 and sp:
            pad_packed_seq_to_multiple_of *= tp_size
    else:
        pad_packed_seq_to_multiple_of = 1
    if pp_size > 1:
        pad_packed_seq_to = max_seq_len_in_batch
    else:
        pad_packed_seq_to = None
    if pad_packed_seq_to is not None:
        pad_packed_seq_to = nemo_rl_round_up_to_multiple(pad_packed_seq_to, pad_packed_seq_to_multiple_of)
    return pad_individual_seqs_to_multiple_of, pad_packed_seq_to_multiple_of, pad_packed_seq_to


def nemo_rl_cu_seqlens_padded(seq_lengths, pad_individual_seqs_to_multiple_of,
                              pad_packed_seq_to_multiple_of, pad_packed_seq_to=None) -> list[int]:
    """The cu_seqlens_padded that _pack_sequences_for_megatron builds for one packed row."""
    needs_padding = (pad_individual_seqs_to_multiple_of > 1 or pad_packed_seq_to_multiple_of > 1
                     or pad_packed_seq_to is not None)
    if not needs_padding:
        cu = [0]
        for seq_len in seq_lengths:
            cu.append(cu[-1] + seq_len)
        return cu
    if pad_packed_seq_to is not None:
        pad_packed_seq_to = nemo_rl_round_up_to_multiple(pad_packed_seq_to, pad_packed_seq_to_multiple_of)
    pad_factor = pad_individual_seqs_to_multiple_of
    cu_seqlens_padded = [0]
    for seq_len in seq_lengths:
        padded_seq_len = nemo_rl_round_up_to_multiple(seq_len, pad_factor)
        cu_seqlens_padded.append(cu_seqlens_padded[-1] + padded_seq_len)
    if pad_packed_seq_to is not None:
        cu_seqlens_padded[-1] = pad_packed_seq_to
    elif pad_packed_seq_to_multiple_of > 1:
        cu_seqlens_padded[-1] = nemo_rl_round_up_to_multiple(cu_seqlens_padded[-1],
                                                             pad_packed_seq_to_multiple_of)
    return cu_seqlens_padded


def nemo_rl_megatron_cfg(tp: int, cp: int, sp: bool, fp8: str) -> dict:
    return {
        "tensor_model_parallel_size": tp,
        "sequence_parallel": sp,
        "pipeline_model_parallel_size": 1,
        "context_parallel_size": cp,
        "fp8_cfg": {"enabled": fp8 != "none", "fp8_recipe": fp8 if fp8 != "none" else None},
    }


def nemo_rl(tp: int, cp: int, sp: bool, fp8: str) -> tuple[int, int]:
    # make_sequence_length_divisible_by is a user setting; its smallest legal value is
    # get_parallel_token_alignment, the one a convention can reproduce.
    cfg = nemo_rl_megatron_cfg(tp, cp, sp, fp8)
    pad_individual, pad_packed_multiple, _ = nemo_rl_get_pack_sequence_parameters_for_megatron(
        cfg, nemo_rl_get_parallel_token_alignment(cfg), 0)
    return pad_individual, math.lcm(pad_individual, pad_packed_multiple)


# --- verl -----------------------------------------------------------------------------
# volcengine/verl@0ba5739880be1b4ba5f394dfc748a2590ea9f44a verl/models/mcore/util.py:
# preprocess_packed_seqs(input_ids, attention_mask, pre_process, use_fp8_padding). Later verl
# factors the FP8 part into _compute_fp8_thd_align_size(align_size) ->
# (lcm(16, align_size), align_size * 128), same numbers. use_fp8_padding is
# `config.fp8 in ["e4m3", "hybrid"]` at the call site: any recipe, no SP switch.


def verl_cu_seqlens_padded(seqlens_in_batch, tp_size: int, cp_size: int,
                           use_fp8_padding: bool = False) -> list[int]:
    """The cu_seqlens_padded that preprocess_packed_seqs builds for one micro-batch."""
    align_size = tp_size * cp_size * 2 if cp_size > 1 else tp_size
    if use_fp8_padding:
        original_align_size = align_size
        align_size = math.lcm(16, align_size)
    pad_size = [(align_size - s % align_size) % align_size for s in seqlens_in_batch]
    seqlens_in_batch_padded = [s + p for s, p in zip(seqlens_in_batch, pad_size)]
    cu_seqlens_padded = [0]
    for s in seqlens_in_batch_padded:
        cu_seqlens_padded.append(cu_seqlens_padded[-1] + s)
    if use_fp8_padding:
        align_size_last = original_align_size * 128
        pad_size_last = (align_size_last - cu_seqlens_padded[-1] % align_size_last) % align_size_last
        cu_seqlens_padded[-1] += pad_size_last
    return cu_seqlens_padded


def verl(tp: int, cp: int, sp: bool, fp8: str) -> tuple[int, int]:
    use_fp8_padding = fp8 != "none"
    align_size = tp * cp * 2 if cp > 1 else tp
    if not use_fp8_padding:
        return align_size, align_size
    original_align_size = align_size
    align_size = math.lcm(16, align_size)
    return align_size, math.lcm(align_size, original_align_size * 128)


# --- megatron-core --------------------------------------------------------------------
# megatron/core/fp8_utils.py get_fp8_align_size (megatron-core 0.16.1, as installed).

def mcore_get_fp8_align_size(fp8_recipe: str) -> int:
    if fp8_recipe == "mxfp8":
        return 32
    else:
        return 16


# --- packtool and per-sequence (DESIGN section 2, no external code) -------------------

def packtool(tp: int, cp: int, sp: bool, fp8: str) -> tuple[int, int]:
    sequence_multiple = 2 * cp if cp > 1 else 1
    tp_sp = tp if sp else 1
    if fp8 == "none":
        fp8_multiple = 1
    elif fp8 == "mxfp8":
        # not run by packtool (Blackwell): megatron-core's 32 on every TP shard
        fp8_multiple = mcore_get_fp8_align_size(fp8) * cp * tp_sp
    else:
        # tensorwise and blockwise, measured on an H200 (BENCHMARKS.md "FP8 training"): each CP rank's
        # GEMMs run on the SP-gathered tokens, and wgrad needs that count divisible by 16
        fp8_multiple = 16 * cp
    packed_multiple = math.lcm(sequence_multiple, cp * tp_sp, fp8_multiple)
    return sequence_multiple, packed_multiple


def per_sequence(tp: int, cp: int, sp: bool, fp8: str) -> tuple[int, int]:
    _, t = packtool(tp, cp, sp, fp8)
    return t, t


TRANSCRIPTIONS = {
    "packtool": packtool,
    "skyrl": skyrl,
    "nemo-rl": nemo_rl,
    "verl": verl,
    "per-sequence": per_sequence,
}
