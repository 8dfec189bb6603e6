"""The alignment model (docs/DESIGN.md §2): the one place that knows divisibility rules.

Two multiples drive everything:
  s  the per-sequence multiple, paid by every segment (CP zigzag needs 2*cp equal chunks);
  t  the per-slab multiple, paid once per packed slab as tail padding (SP/TP split, FP8 tiles).
Packers, the writer, `verify` and the training loader all ask this module; none re-derives.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from packtool.errors import PacktoolConfigError, arg, bad_choice
from packtool.params import check_fields

FP8_RECIPES = ("none", "tensorwise", "mxfp8", "blockwise")
CONVENTIONS = ("packtool", "skyrl", "nemo-rl", "verl", "per-sequence")


class AlignmentError(PacktoolConfigError):
    """Invalid alignment settings; the message names the flag to change."""


MAX_SLAB_TOKENS = 2**31 - 1  # a slab's offsets are int32 (FORMAT.md)


def round_up(x, m):
    """Round x (int or integer ndarray) up to a multiple of m."""
    return -(-x // m) * m


def _lcm(*xs: int) -> int:
    return math.lcm(*xs)


# --- conventions: (tp, cp, tp_sp, fp8) -> (s, t) -------------------------------------
# Each transcribes the cited framework function; tests keep an independent transcription.

# Local token count T (the tokens one CP rank's GEMMs see; with SP, after the all-gather)
# that packtool's FP8 linears need to be a multiple of, found by running them on an H200
# (bench/fp8_tiles.py, torch 2.11 cuBLASLt; BENCHMARKS.md "FP8 training"): T is M in fprop/dgrad (any
# M for tensorwise, a multiple of 8 for blockwise's 1x128 scales) and the reduction dim in
# wgrad, where torch._scaled_mm wants it divisible by 16 for both recipes; a ragged last
# 1x128 block along T is accepted and exact. mxfp8 (Blackwell only) is not measured here:
# its 32 is megatron-core's get_fp8_align_size.
FP8_TOKEN_MULTIPLE = {"none": 1, "tensorwise": 16, "blockwise": 16, "mxfp8": 32}


def fp8_token_multiple(fp8: str) -> int:
    """The multiple an FP8 GEMM needs of its local (per CP rank, SP-gathered) token count."""
    return FP8_TOKEN_MULTIPLE[fp8]


def _packtool(tp: int, cp: int, tp_sp: int, fp8: str) -> tuple[int, int]:
    # docs/DESIGN.md §2, FP8 part settled against the kernels (FP8_TOKEN_MULTIPLE): packtool's
    # linears all-gather the SP shards in bf16 and quantize after the gather, so the GEMMs
    # need slab/cp to be a multiple of r, not each TP shard (r * cp * tp_sp, the older rule,
    # was SkyRL's reasoning for TransformerEngine's FP8 all-gather). mxfp8 keeps that older
    # shard rule: packtool runs no mxfp8 GEMM, so nothing here measured where it quantizes.
    s = 2 * cp if cp > 1 else 1
    r = fp8_token_multiple(fp8)
    f = r * cp * tp_sp if fp8 == "mxfp8" else r * cp
    return s, _lcm(s, cp * tp_sp, f)


def _skyrl(tp: int, cp: int, tp_sp: int, fp8: str) -> tuple[int, int]:
    # SkyRL skyrl/backends/skyrl_train/distributed/megatron/packing_utils.py (PR #2108 stack,
    # dyurk-lila/SkyRL@7c5f069): get_packing_align_size_sequence / get_packing_align_size_total
    # with _fp8_token_align. SkyRL's Megatron path always runs SP with TP, so it uses tp, not
    # tp_sp. _fp8_token_align tests only for mxfp8 (is_mxfp8_recipe); every other recipe,
    # tensorwise included, takes the blockwise branch: 128*tp*cp when tp>1, else 16*cp.
    s = 2 * tp * cp if cp > 1 else 1
    layout = 2 * tp * cp if cp > 1 else tp
    if fp8 == "none":  # fp8_enabled=False: the slab multiple is the layout multiple alone
        return s, _lcm(s, layout)
    if fp8 == "mxfp8":
        f = 32 * tp * cp
    elif tp > 1:
        f = 128 * tp * cp
    else:
        f = 16 * cp
    return s, _lcm(s, layout, f)


def _nemo_rl(tp: int, cp: int, tp_sp: int, fp8: str) -> tuple[int, int]:
    # NeMo-RL nemo_rl/models/megatron/data.py (earlier common.py):
    # _get_pack_sequence_parameters_for_megatron with get_parallel_token_alignment and
    # get_fp8_token_alignment. pad_individual_seqs_to_multiple_of is at least
    # (2*cp if cp>1) * (tp if tp>1 and sp); with FP8 the packed sequence is padded to
    # divisor * (2*cp if cp>1) * (tp if tp>1 and sp), divisor 128 blockwise, 32 mxfp8,
    # 16 otherwise (the older common.py@07fee340 had no mxfp8 case: 16).
    cp_f = 2 * cp if cp > 1 else 1
    s = cp_f * tp_sp
    if fp8 == "none":
        return s, s
    div = {"blockwise": 128, "mxfp8": 32, "tensorwise": 16}[fp8]
    return s, _lcm(s, div * cp_f * tp_sp)


def _verl(tp: int, cp: int, tp_sp: int, fp8: str) -> tuple[int, int]:
    # verl verl/models/mcore/util.py (volcengine/verl@0ba5739): preprocess_packed_seqs
    # (use_fp8_padding=...). align_size = tp*cp*2 if cp>1 else tp; FP8: each sequence to
    # lcm(16, align_size), cu_seqlens_padded[-1] to a multiple of align_size*128.
    # verl ignores SP and the recipe (use_fp8_padding is set by config.fp8 e4m3/hybrid).
    align = tp * cp * 2 if cp > 1 else tp
    if fp8 == "none":
        return align, align
    s = _lcm(16, align)
    return s, _lcm(s, align * 128)


def _per_sequence(tp: int, cp: int, tp_sp: int, fp8: str) -> tuple[int, int]:
    # The naive rule: every sequence pays packtool's full slab multiple t.
    _, t = _packtool(tp, cp, tp_sp, fp8)
    return t, t


_CONVENTION_FN = {"packtool": _packtool, "skyrl": _skyrl, "nemo-rl": _nemo_rl,
                  "verl": _verl, "per-sequence": _per_sequence}


def sp_note(tp: int, sp: bool | None) -> str | None:
    """What to tell a user who asked for sequence parallelism with tp=1 (it is turned off)."""
    if sp and tp == 1:
        return (f"{arg('sp')} has no effect with {arg('tp', 1)} (sequence parallelism splits activations across "
                "the tensor-parallel group; megatron-core turns it off too): packing with sp=off")
    return None


@dataclass(frozen=True)
class Alignment:
    """Alignment settings and the multiples they imply.

    >>> a = Alignment(tp=4, cp=2, capacity=32)
    >>> (a.s, a.t, a.usable)
    (4, 8, 32)
    """

    tp: int = 1
    cp: int = 1
    sp: bool | None = None  # None: on when tp > 1 (megatron's usual setting); off when tp == 1
    fp8: str = "none"
    capacity: int = 8192
    fixed_length: int | None = None
    convention: str = "packtool"
    s: int = field(init=False)
    t: int = field(init=False)
    usable: int = field(init=False)

    def __post_init__(self) -> None:
        # numpy ints become int (a manifest records them as JSON); bools, floats, strs refused
        check_fields(self, "tp", "cp", "sp", "capacity", "fixed_length", error=AlignmentError)
        if self.fp8 not in FP8_RECIPES:
            raise bad_choice(AlignmentError, "fp8", self.fp8, FP8_RECIPES)
        if self.convention not in CONVENTIONS:
            raise bad_choice(AlignmentError, "convention", self.convention, CONVENTIONS)
        # SP splits activations across the TP group: with tp=1 there is none, and megatron-core
        # turns it off ("Disabling sequence parallelism because tensor model parallelism is
        # disabled"); so does packtool, and `sp_note` says so to a user who asked for it.
        sp = self.tp > 1 if self.sp is None else self.sp and self.tp > 1
        object.__setattr__(self, "sp", sp)
        s, t = _CONVENTION_FN[self.convention](int(self.tp), int(self.cp), self.tp_sp, self.fp8)
        assert t % s == 0, (s, t)  # the tail pad must keep every segment divisible by s
        object.__setattr__(self, "s", s)
        object.__setattr__(self, "t", t)
        object.__setattr__(self, "usable", self._usable())

    def _usable(self) -> int:
        if self.fixed_length is not None:
            L = self.fixed_length
            if L > MAX_SLAB_TOKENS:
                raise AlignmentError(f"{arg('fixed_length', L)} is above {MAX_SLAB_TOKENS:,}, the most a "
                                     f"slab can hold (FORMAT.md: its offsets are int32)")
            if L % self.t:
                up, down = round_up(L, self.t), L - L % self.t
                fix = (f"use {arg('fixed_length', up)}" if up <= self.capacity else  # -C must stay >= it
                       f"use {arg('fixed_length', up)} with {arg('capacity', up)}" +
                       (f", or {arg('fixed_length', down)}" if down else ""))
                raise AlignmentError(
                    f"{arg('fixed_length', L)} is not a multiple of the packed multiple t={self.t} "
                    f"({self.describe()}): {fix}")
            if L > self.capacity:  # it would silently win over capacity, the size the user set
                raise AlignmentError(f"{arg('fixed_length', L)} is larger than {arg('capacity', self.capacity)}: "
                                     f"pass {arg('capacity', L)} too, or a smaller {arg('fixed_length')}")
            return L
        C = self.capacity
        if C > MAX_SLAB_TOKENS:
            raise AlignmentError(f"{arg('capacity', C)} is above {MAX_SLAB_TOKENS:,}, the most a slab "
                                 f"can hold (FORMAT.md: its offsets are int32): lower {arg('capacity')}")
        U = C - C % self.t
        if U == 0:
            raise AlignmentError(
                f"{arg('capacity', C)} is below the packed multiple t={self.t} ({self.describe()}): "
                f"raise {arg('capacity')} to at least {self.t}")
        return U

    @property
    def usable_arg(self) -> str:
        """The argument that sets the usable capacity U, the one a fix for "too long for the slab"
        names: fixed_length when given (every slab is that long; a larger capacity alone changes
        nothing), else capacity."""
        return "capacity" if self.fixed_length is None else "fixed_length"

    def raise_usable(self) -> str:
        """How to give the slab more room, in the caller's words (errors.arg)."""
        if self.fixed_length is None:
            return f"raise {arg('capacity')}"
        return f"raise {arg('fixed_length')} (with {arg('capacity')} at least as large)"

    @property
    def tp_sp(self) -> int:
        return self.tp if (self.sp if self.sp is not None else self.tp > 1) else 1

    def describe(self) -> str:
        return (f"tp={self.tp} cp={self.cp} sp={'on' if self.sp else 'off'} fp8={self.fp8} "
                f"convention={self.convention}")

    # --- footprints ----------------------------------------------------------------
    def seq_footprint(self, lengths):
        """Physical length of each sequence: its length rounded up to s."""
        return round_up(np.asarray(lengths, dtype=np.int64), self.s)

    def bin_footprint(self, seq_footprint_sum):
        """A slab's length before any fixed-length fill: sum of footprints rounded up to t."""
        return round_up(np.asarray(seq_footprint_sum, dtype=np.int64), self.t)

    def slab_length(self, seq_footprint_sum):
        """Physical length of a slab on disk (fixed_length when set, for bins that fit)."""
        fp = self.bin_footprint(seq_footprint_sum)
        if self.fixed_length is None:
            return fp
        return np.maximum(fp, self.fixed_length)

    # --- bounds --------------------------------------------------------------------
    def lower_bound(self, lengths) -> int:
        """Singletons (footprint > U) plus ceil(sum of the other footprints / U)."""
        fp = self.seq_footprint(lengths)
        over = fp > self.usable
        return int(over.sum()) + int(-(-int(fp[~over].sum()) // self.usable))

    def l2_bound(self, lengths) -> int:
        """Martello-Toth L2 over footprints that fit, plus the singletons."""
        fp = self.seq_footprint(lengths)
        over = fp > self.usable
        return int(over.sum()) + martello_toth_l2(fp[~over], self.usable)


def martello_toth_l2(sizes: np.ndarray, capacity: int) -> int:
    """L2 = max over k in [0, C/2] of |J1|+|J2| + max(0, ceil((S(J3) - (|J2|C - S(J2))) / C)),
    J1 = {w > C-k}, J2 = {C/2 < w <= C-k}, J3 = {k <= w <= C/2}. Vectorized over the distinct
    k that matter (0 and each size <= C/2)."""
    w = np.sort(np.asarray(sizes, dtype=np.int64))
    if w.size == 0:
        return 0
    C = int(capacity)
    pre = np.concatenate(([0], np.cumsum(w)))
    ks = np.unique(np.concatenate(([0], w[w * 2 <= C])))
    n = w.size
    i_gt_cmk = np.searchsorted(w, C - ks, side="right")  # first index with w > C-k
    i_gt_half = np.searchsorted(w, C // 2, side="right")  # first index with w > C/2
    i_ge_k = np.searchsorted(w, ks, side="left")  # first index with w >= k
    n1 = n - i_gt_cmk
    n2 = np.maximum(i_gt_cmk - i_gt_half, 0)
    s2 = pre[np.maximum(i_gt_cmk, i_gt_half)] - pre[i_gt_half]
    s3 = pre[i_gt_half] - pre[np.minimum(i_ge_k, i_gt_half)]
    extra = np.maximum(0, -(-(s3 - (n2 * C - s2)) // C))
    return int((n1 + n2 + extra).max())
