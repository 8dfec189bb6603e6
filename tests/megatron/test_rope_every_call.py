"""Every call of a build_gpt model applies its RoPE (S48B-7). RL.md's Megatron loop and TRAINING.md call
`model(mb.input_ids, mb.position_ids, None, packed_seq_params=mb.params)`; packtool's RoPE was attached
to the batch only by hidden_states()/token_losses(), so that call, run first on a batch, used no position
at all and trained a position-blind model with no word. Each way of calling the model gives the logits
of the hidden_states path; RL.md's loop, run verbatim from the doc, gives the gradients it gives with
its logits line taken through hidden_states."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core")

from megatron_slabs import greedy_bins, logprob_of, random_sequences, write_slab_dir  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.errors import PacktoolInputError  # noqa: E402
from packtool.megatron.dataset import PackedSlabDataset  # noqa: E402
from packtool.megatron.model import GPTShape, build_gpt, hidden_states  # noqa: E402
from packtool.megatron.parallel import init_parallel  # noqa: E402

SHAPE = GPTShape(layers=2, hidden=32, heads=4, ffn=64, vocab=128, kv_heads=2, max_seq=512)
RL_MD = Path(__file__).resolve().parents[2] / "docs" / "RL.md"
DOC_LINE = "logits = model(mb.input_ids, mb.position_ids, None, packed_seq_params=mb.params)"


@pytest.fixture(scope="module")
def slabs(tmp_path_factory):
    from packtool.side import SideColumn
    seqs = random_sequences(12, 5, 40, seed=4)
    rng = np.random.default_rng(4)
    side = [(SideColumn("old_logprobs", "float32"), [logprob_of(ids) for ids, _ in seqs]),
            (SideColumn("advantages", "float32"), [rng.normal(size=len(ids)) for ids, _ in seqs])]
    align = Alignment(capacity=96)
    return str(write_slab_dir(str(tmp_path_factory.mktemp("rope") / "s"), seqs, greedy_bins(seqs, align), align,
                              side=side))


def _model(rope="packtool"):
    init_parallel(1, 1, "cpu")
    return build_gpt(SHAPE, seed=3, rope=rope)


def _via_hidden(model, mb):
    return model.output_layer(hidden_states(model, mb))[0].transpose(0, 1)  # [1, t, V] as model() gives


CALLS = {
    "documented": lambda m, mb: m(mb.input_ids, mb.position_ids, None, packed_seq_params=mb.params),
    "keywords": lambda m, mb: m(input_ids=mb.input_ids, position_ids=mb.position_ids, attention_mask=None,
                                packed_seq_params=mb.params),
    "positional": lambda m, mb: m(mb.input_ids, mb.position_ids, None, None, None, None, mb.params),
}


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("first", ["plain call first", "after hidden_states"])
def test_every_call_applies_rope(slabs, call, first):
    model = _model()
    ds = PackedSlabDataset(slabs, cp_size=1)
    ref = _via_hidden(model, ds.load([0]))
    mb = ds.load([0])
    if first == "after hidden_states":
        hidden_states(model, mb)
    torch.testing.assert_close(CALLS[call](model, mb), ref, rtol=0, atol=0)


def test_the_call_follows_the_positions_given(slabs):
    """The rotation is the call's positions', not the first call's: reversed positions on the same
    params change the logits (they did not at all before)."""
    model = _model()
    mb = PackedSlabDataset(slabs, cp_size=1).load([0])
    plain = CALLS["documented"](model, mb)
    flipped = model(mb.input_ids, mb.position_ids.flip(-1), None, packed_seq_params=mb.params)
    assert (plain - flipped).abs().max() > 1e-4
    torch.testing.assert_close(CALLS["documented"](model, mb), plain, rtol=0, atol=0)


def test_a_megatron_rope_model_does_not_rotate_twice(slabs):
    """A batch a packtool-RoPE model ran on first: a rope='megatron' model on the same weights still
    gives its own logits (megatron rotates in SelfAttention; the batch's packtool rotation is not
    applied on top)."""
    a, b = _model("packtool"), _model("megatron")
    b.load_state_dict(a.state_dict())
    ds = PackedSlabDataset(slabs, cp_size=1)
    fresh = CALLS["documented"](b, ds.load([0]))
    mb = ds.load([0])
    CALLS["documented"](a, mb)
    torch.testing.assert_close(CALLS["documented"](b, mb), fresh, rtol=0, atol=0)
    torch.testing.assert_close(fresh, CALLS["documented"](a, ds.load([0])), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("pos", [None, "ids [t]"])
def test_no_positions_is_refused_in_one_line(slabs, pos):
    model = _model()
    mb = PackedSlabDataset(slabs, cp_size=1).load([0])
    given = None if pos is None else mb.position_ids[0]
    with pytest.raises(PacktoolInputError) as e:
        model(mb.input_ids, given, None, packed_seq_params=mb.params)
    msg = str(e.value)
    assert "\n" not in msg and "position_ids" in msg and "mb.position_ids" in msg


def _rl_loop() -> str:
    """RL.md's Megatron loop as the doc prints it."""
    blocks = re.findall(r"```python\n(.*?)```", RL_MD.read_text(), re.S)
    (code,) = [b for b in blocks if DOC_LINE in b]
    return code


class _Steps:
    """The doc's `ds`, its steps() ending after one epoch (PackedSlabDataset's run forever)."""

    def __init__(self, ds):
        self.ds = ds

    def steps(self):
        return self.ds.steps(max_steps=self.ds.steps_per_epoch())


def test_rl_md_loop_verbatim_matches_the_hidden_states_path(slabs):
    code = _rl_loop()
    via_hidden = code.replace(DOC_LINE, "logits = _via_hidden(model, mb)")
    grads = []
    for text in (code, via_hidden):
        model = _model()
        exec(compile(text, str(RL_MD), "exec"), {"torch": torch, "model": model, "_via_hidden": _via_hidden,
                                                 "ds": _Steps(PackedSlabDataset(slabs, cp_size=1))})
        grads.append({k: p.grad for k, p in model.named_parameters()})
    assert all(g is not None for g in grads[0].values())
    for k in grads[0]:
        torch.testing.assert_close(grads[0][k], grads[1][k], rtol=1e-5, atol=1e-7)


# RB-4 / S49B-1: the rotation was cached on the shared batch keyed by its position_ids alone, so a
# second model on one micro-batch (an RL reference, reward or critic model) ran with the first
# model's: another rope_base silently, another head dim as torch's broadcast error, another dtype with
# the first's rounding; a user's own GPTModel (megatron RoPE, PackedCoreAttention) got the rotation
# left on the batch on top of its own. Each model now applies its own, whatever ran first.
OTHERS = {
    "another rope_base": lambda: build_gpt(GPTShape(**{**SHAPE.__dict__, "rope_base": 500000}), seed=5),
    "another head dim": lambda: build_gpt(GPTShape(**{**SHAPE.__dict__, "hidden": 64}), seed=5),
    "another dtype": lambda: build_gpt(SHAPE, seed=5, dtype=torch.float64),
    "megatron's RoPE": lambda: build_gpt(SHAPE, seed=5, rope="megatron"),
    "the same model again": lambda: build_gpt(SHAPE, seed=3),
}


@pytest.mark.parametrize("other", OTHERS)
@pytest.mark.parametrize("order", ["other after the policy", "policy after the other"])
def test_each_model_on_a_shared_batch_applies_its_own_rope(slabs, other, order):
    policy, second = _model(), OTHERS[other]()
    ds = PackedSlabDataset(slabs, cp_size=1)
    call = CALLS["documented"]
    alone = {"policy": call(policy, ds.load([0])), "other": call(second, ds.load([0]))}
    mb = ds.load([0])
    first, then = (policy, second) if order == "other after the policy" else (second, policy)
    shared = {id(first): call(first, mb)}
    shared[id(then)] = call(then, mb)
    shared[id(first)] = call(first, mb)  # and the first again, after the other ran
    torch.testing.assert_close(shared[id(policy)], alone["policy"], rtol=0, atol=0)
    torch.testing.assert_close(shared[id(second)], alone["other"], rtol=0, atol=0)


def test_a_user_gptmodel_sees_no_rotation_another_model_left(slabs):
    """TRAINING.md's own model (GPTModel with PackedCoreAttention, no packtool hook) gives the same
    logits on a batch a build_gpt model ran on first as on a fresh one."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel

    from packtool.megatron.attention import PackedCoreAttention
    from packtool.megatron.model import cpu_rope, transformer_config
    policy = _model()
    layer = get_gpt_layer_local_spec()
    layer.submodules.self_attention.submodules.core_attention = PackedCoreAttention
    torch.manual_seed(0)
    own = cpu_rope(GPTModel(transformer_config(SHAPE, torch.float32, torch.device("cpu")), layer,
                            vocab_size=SHAPE.vocab, max_sequence_length=SHAPE.max_seq,
                            position_embedding_type="rope"))
    ds = PackedSlabDataset(slabs, cp_size=1)
    alone = CALLS["documented"](own, ds.load([0]))
    mb = ds.load([0])
    CALLS["documented"](policy, mb)
    torch.testing.assert_close(CALLS["documented"](own, mb), alone, rtol=0, atol=0)


def test_an_attention_layer_called_without_its_model_is_refused(slabs):
    """The rotation comes from the model's pre-hook: a layer run alone on params no call of its model
    filled would run position-blind; it says so in one line."""
    from packtool.megatron.attention import PackedCoreAttention
    model = _model()
    mb = PackedSlabDataset(slabs, cp_size=1).load([0])
    attn = next(m for m in model.modules() if isinstance(m, PackedCoreAttention))
    q = torch.zeros(mb.input_ids.shape[1], 4, 8)
    kv = torch.zeros(mb.input_ids.shape[1], 2, 8)
    with pytest.raises(PacktoolInputError, match="call the model itself"):
        attn(q, kv, kv, None, packed_seq_params=mb.params)
