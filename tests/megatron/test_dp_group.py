"""RB-11: `PackedSlabDataset(dp_rank=..., dp_size=...)` without dp_group (the module docstring's own
form; megatron hands rank and size out by two calls) left the group None, so
`Step.global_loss_tokens()` ("all-reduced over DP") was each rank's own count: every rank divided
its loss by another denominator, with no word. A group left out is now the one megatron's
parallel_state runs when what was given agrees with it (params.process_coords, both axes); where
none is known, global_loss_tokens refuses rather than return a local count."""
from __future__ import annotations

import pytest

pytest.importorskip("megatron.core")

from megatron_slabs import greedy_bins, random_sequences, run_threads, thread_cp_groups, write_slab_dir  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.errors import PacktoolConfigError  # noqa: E402
from packtool.megatron.dataset import PackedSlabDataset  # noqa: E402


def _packed(tmp_path_factory, cp: int) -> str:
    a = Alignment(cp=cp, capacity=96)
    seqs = random_sequences(24, 5, 60, seed=4)
    return str(write_slab_dir(str(tmp_path_factory.mktemp("dp") / "s"), seqs, greedy_bins(seqs, a), a))


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> str:
    return _packed(tmp_path_factory, 1)


@pytest.fixture(scope="module")
def packed_cp2(tmp_path_factory) -> str:
    return _packed(tmp_path_factory, 2)


# what a DP rank's script gives (rank 1 of 2; the group, where given, is the one parallel_state runs)
FORMS = {"rank and size": ("rank", "size"), "rank, size and group": ("rank", "size", "group"),
         "group only": ("group",), "nothing (parallel_state)": ()}


def _given(axis: str, form: str, rank: int, group) -> dict:
    full = {f"{axis}_rank": rank, f"{axis}_size": 2, f"{axis}_group": group}
    return {k: v for k, v in full.items() if k.split("_")[1] in FORMS[form]}


def _gloo_groups(n: int) -> list:
    """n real gloo groups of one rendezvous, rank r's to be used by thread r (torch's all_reduce, no
    default group needed): a DP job of n ranks in one process, no spawn."""
    import torch.distributed as dist
    store = dist.HashStore()
    return run_threads([lambda r=r: dist.ProcessGroupGloo(dist.PrefixStore("dp", store), r, n) for r in range(n)])


def test_every_form_of_a_dp_rank_sums_the_loss_tokens_over_dp(packed, monkeypatch):
    import threading

    from megatron.core import parallel_state as ps
    groups, mine = _gloo_groups(2), threading.local()  # megatron's parallel_state, per rank (thread)
    monkeypatch.setattr(ps, "model_parallel_is_initialized", lambda: True)
    monkeypatch.setattr(ps, "get_context_parallel_world_size", lambda *a, **k: 1)
    monkeypatch.setattr(ps, "get_data_parallel_world_size", lambda *a, **k: 2)
    monkeypatch.setattr(ps, "get_data_parallel_rank", lambda *a, **k: mine.rank)
    monkeypatch.setattr(ps, "get_data_parallel_group", lambda *a, **k: groups[mine.rank])

    def rank(r):
        mine.rank, got = r, {}
        for form in FORMS:
            st = next(iter(PackedSlabDataset(packed, **_given("dp", form, r, groups[r])).steps(max_steps=1)))
            got[form] = (st.loss_tokens, st.global_loss_tokens())
        return got

    got = run_threads([lambda r=r: rank(r) for r in range(2)])
    for form in FORMS:
        (own0, sum0), (own1, sum1) = got[0][form], got[1][form]
        assert own0 != own1 and sum0 == sum1 == own0 + own1, (form, got)


def _parallel_state(monkeypatch, axis: str, size: int, rank: int, group) -> None:
    from megatron.core import parallel_state as ps
    kind = {"dp": "data", "cp": "context"}[axis]
    monkeypatch.setattr(ps, "model_parallel_is_initialized", lambda: True)
    for other in ("data", "context"):
        monkeypatch.setattr(ps, f"get_{other}_parallel_world_size", lambda *a, **k: 1)
    monkeypatch.setattr(ps, f"get_{kind}_parallel_world_size", lambda *a, **k: size)
    monkeypatch.setattr(ps, f"get_{kind}_parallel_rank", lambda *a, **k: rank)
    monkeypatch.setattr(ps, f"get_{kind}_parallel_group", lambda *a, **k: group)


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("axis", ["dp", "cp"])
def test_a_group_left_out_is_the_one_parallel_state_runs(packed, packed_cp2, monkeypatch, axis, form):
    groups = thread_cp_groups(2)
    _parallel_state(monkeypatch, axis, 2, 1, groups[1])
    ds = PackedSlabDataset(packed if axis == "dp" else packed_cp2, **_given(axis, form, 1, groups[1]))
    assert (getattr(ds, f"{axis}_rank"), getattr(ds, f"{axis}_size"), getattr(ds, f"{axis}_group")) == (
        1, 2, groups[1]), form


# where no group is known (no megatron job, or one whose DP disagrees with what was given: not taken),
# the step's count is this rank's own, and the call that would pass it for the DP sum is refused
@pytest.mark.parametrize("state", ["no megatron job", "a job of another DP"])
def test_a_dp_rank_with_no_group_refuses_the_dp_sum(packed, monkeypatch, state):
    if state != "no megatron job":
        _parallel_state(monkeypatch, "dp", 4, 1, thread_cp_groups(4)[1])
    ds = PackedSlabDataset(packed, dp_rank=1, dp_size=2)
    assert ds.dp_group is None
    st = next(iter(ds.steps(max_steps=1)))
    with pytest.raises(PacktoolConfigError) as e:
        st.global_loss_tokens()
    msg = str(e.value)
    assert "dp_size=2 but has no dp_group" in msg and "pass dp_group" in msg and "\n" not in msg, msg
