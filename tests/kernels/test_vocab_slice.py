"""A TP rank's vocab slice of the output weight, given without tp_group (S50B-4), at every LM-head door.

Megatron marks the vocab-split output weight `tensor_model_parallel` (partition_dim 0), at TP 1 too.
While megatron's TP group is larger than one, such a weight holds rows [rank * V/TP, ...): read without
the group as ids from 0, rank 0 blamed the data for its ids above V/TP and rank 1 scored other tokens
with no word. Each door refuses it in one line naming tp_group; at TP 1 the same mark is the whole
vocabulary and runs. Megatron's TP size is set the way initialize_model_parallel leaves it (its
module globals), so no process group is needed here.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
ps = pytest.importorskip("megatron.core.parallel_state")

from packtool.align import Alignment  # noqa: E402
from packtool.errors import PacktoolInputError  # noqa: E402
from packtool.kernels.lm_head import fused_linear_cross_entropy, fused_linear_logprobs_entropy  # noqa: E402
from packtool.kernels.support_logprob import support_logprob  # noqa: E402
from packtool.online.support import support_logprobs_thd  # noqa: E402
from packtool.online.thd import thd_batch  # noqa: E402

V_LOCAL, H = 16, 8


def _weight(marked: bool) -> torch.nn.Parameter:
    w = torch.nn.Parameter(torch.randn(V_LOCAL, H, generator=torch.Generator().manual_seed(0)))
    if marked:  # what megatron's ColumnParallelLinear sets on output_layer.weight
        w.tensor_model_parallel, w.partition_dim = True, 0
    return w


def _thd(w):
    ids = [torch.tensor([1, 2, 3, 4, 5])]
    sup = [torch.tensor([[1, 2], [2, 3], [3, 4], [4, 5], [5, 6]])]
    b = thd_batch(ids, Alignment(cp=1, capacity=16), side={"support": sup})
    h = torch.randn(b.labels.numel(), 1, H)
    return support_logprobs_thd(b, h, w, "support")


def _kernel(w):
    h, t = torch.randn(4, H), torch.tensor([1, 2, 3, 4])
    return support_logprob(h, w, t, torch.stack([t, t + 1], 1))


DOORS = {
    "support_logprobs_thd": _thd,
    "support_logprob": _kernel,
    "fused_linear_cross_entropy[torch]": lambda w: fused_linear_cross_entropy(
        torch.randn(4, H), w, torch.tensor([1, 2, 3, 4]), impl="torch"),
    "fused_linear_cross_entropy[fused]": lambda w: fused_linear_cross_entropy(
        torch.randn(4, H), w, torch.tensor([1, 2, 3, 4]), impl="fused"),
    "fused_linear_logprobs_entropy[torch]": lambda w: fused_linear_logprobs_entropy(
        torch.randn(4, H), w, torch.tensor([1, 2, 3, 4]), impl="torch"),
    "fused_linear_logprobs_entropy[fused]": lambda w: fused_linear_logprobs_entropy(
        torch.randn(4, H), w, torch.tensor([1, 2, 3, 4]), impl="fused"),
}


@pytest.fixture
def megatron_tp(monkeypatch):
    def set_tp(size: int):
        monkeypatch.setattr(ps, "_TENSOR_MODEL_PARALLEL_GROUP", object())
        monkeypatch.setattr(ps, "_MPU_TENSOR_MODEL_PARALLEL_WORLD_SIZE", size)
    return set_tp


@pytest.mark.parametrize("door", DOORS)
def test_vocab_slice_without_tp_group_is_refused_naming_it(door, megatron_tp):
    megatron_tp(2)
    with pytest.raises(PacktoolInputError) as e:
        DOORS[door](_weight(marked=True))
    msg = str(e.value)
    assert "\n" not in msg and "tp_group=" in msg and f"{V_LOCAL} of {2 * V_LOCAL} rows" in msg, msg


@pytest.mark.parametrize("door", ["support_logprobs_thd", "support_logprob", "fused_linear_cross_entropy[torch]",
                                  "fused_linear_logprobs_entropy[torch]"])
@pytest.mark.parametrize("case", ["tp1_marked", "tp2_unmarked", "no_megatron_groups"])
def test_whole_vocabulary_still_runs(door, case, megatron_tp):
    # TP 1 marks its (whole) weight too; an unmarked weight is the caller's own; no groups: not a megatron job
    if case == "tp1_marked":
        megatron_tp(1)
    elif case == "tp2_unmarked":
        megatron_tp(2)
    DOORS[door](_weight(marked=case != "tp2_unmarked"))
