"""The support-scoring helpers of packtool.online name what their caller passed (S38-7): a batch's
labels or support rows that are not integer ids, or that lie on another device than the hidden
states, are one PacktoolInputError naming the batch key (`batch['labels']`, `batch.labels`,
`batch['shift_support']`, `batch.side_targets['support']`), never the kernel's inner `sampled`,
and a float support row is refused rather than truncated (1.7 -> candidate 1)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from packtool.align import Alignment  # noqa: E402
from packtool.errors import PacktoolInputError  # noqa: E402
from packtool.online import thd_batch  # noqa: E402
from packtool.online.support import support_logprobs_hf, support_logprobs_thd  # noqa: E402

V, K, H, L = 64, 3, 8, 10


def _rows(ids):
    rows = torch.stack([ids, (ids + 1) % V, torch.full_like(ids, -1)], 1)
    return rows.to(torch.int32)


def _hf():
    """A SlabCollator-shaped batch: labels -100 at each segment's start, shift_support = the
    target-aligned rows (position p: token p+1's)."""
    ids = torch.randint(0, V, (L,), generator=torch.Generator().manual_seed(0))
    labels = ids.clone()
    labels[:2] = -100
    shift = torch.cat([_rows(ids)[1:], torch.full((1, K), -1, dtype=torch.int32)])
    return {"labels": labels[None], "shift_support": shift[None]}, torch.randn(1, L, H)


def _thd():
    ids = torch.randint(0, V, (L,), generator=torch.Generator().manual_seed(1))
    b = thd_batch([ids], Alignment(capacity=16), side={"support": [_rows(ids)]})
    return b, torch.randn(b.labels.shape[1], 1, H)


def _set(batch, key, value):
    if isinstance(batch, dict):
        batch[key] = value
    elif key == "labels" or key == "loss_weight":
        setattr(batch, key, value)
    else:
        batch.side_targets[key] = value


HELPERS = {  # helper -> (batch maker, its call, the batch's keys as the caller spells them)
    "hf": (_hf, support_logprobs_hf, {"labels": ("labels", "batch['labels']"),
                                      "support": ("shift_support", "batch['shift_support']")}),
    "thd": (_thd, support_logprobs_thd, {"labels": ("labels", "batch.labels"),
                                         "support": ("support", "batch.side_targets['support']")}),
}
CASES = [(h, k) for h in HELPERS for k in ("labels", "support")]


def _get(batch, key):
    return batch[key] if isinstance(batch, dict) else getattr(batch, key, None) if key == "labels" \
        else batch.side_targets[key]


def _fails(helper, batch, hidden, *words):
    make, call, _ = HELPERS[helper]
    with pytest.raises(PacktoolInputError) as e:
        call(batch, hidden, torch.randn(V, H))
    msg = str(e.value)
    assert "\n" not in msg and "sampled" not in msg, msg
    for w in (call.__name__,) + words:
        assert w in msg, msg


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bool], ids=str)
@pytest.mark.parametrize("helper,what", CASES, ids=[f"{h}-{k}" for h, k in CASES])
def test_ids_that_are_not_integers_are_refused_naming_the_batch_key(helper, what, dtype):
    make, _, keys = HELPERS[helper]
    batch, hidden = make()
    key, said = keys[what]
    x = _get(batch, key)
    _set(batch, key, (x > 0) if dtype == torch.bool else x.to(dtype) + 0.7 * (x >= 0))
    _fails(helper, batch, hidden, f"{said} is {dtype}", "expected integer")


@pytest.mark.parametrize("helper,what", CASES + [("thd", "loss_weight")],
                         ids=[f"{h}-{k}" for h, k in CASES] + ["thd-loss_weight"])
def test_a_batch_tensor_on_another_device_is_named_by_its_key(helper, what):
    make, _, keys = HELPERS[helper]
    batch, hidden = make()
    key, said = keys.get(what, (what, f"batch.{what}"))
    _set(batch, key, _get(batch, key).to("meta") if what != "loss_weight" else batch.loss_weight.to("meta"))
    _fails(helper, batch, hidden, f"{said} is on meta but hidden is on cpu")


@pytest.mark.parametrize("helper", HELPERS)
def test_the_clean_batch_scores(helper):
    make, call, _ = HELPERS[helper]
    batch, hidden = make()
    lp, _, valid = call(batch, hidden, torch.randn(V, H))
    assert valid.sum() > 0 and lp.shape == valid.shape


def test_float_labels_of_an_hf_batch_name_batch_labels_s38_7():
    batch, hidden = _hf()
    batch["labels"] = batch["labels"].float()
    with pytest.raises(PacktoolInputError,
                       match=r"^support_logprobs_hf: batch\['labels'\] is torch.float32: expected integer token ids"):
        support_logprobs_hf(batch, hidden, torch.randn(V, H))
    del batch["labels"]
    with pytest.raises(PacktoolInputError, match=r"^support_logprobs_hf: the batch has no 'labels'"):
        support_logprobs_hf(batch, hidden, torch.randn(V, H))


def _first_active(batch, helper):
    if helper == "hf":
        flat = batch["labels"].flatten()
        return int(torch.nonzero(flat[1:] != -100)[1, 0])  # a position whose target (label p + 1) counts
    return int(torch.nonzero(batch.loss_weight.flatten() != 0)[1, 0])


def _plant(batch, helper, case, p):
    sup = batch["shift_support"] if helper == "hf" else batch.side_targets["support"]
    if case == "outside":
        sup.view(-1, K)[p, 0] = V + 5
    else:  # the sampled id (the label) not among its row's candidates
        labels = batch["labels"] if helper == "hf" else batch.labels
        row = sup.view(-1, K)[p]
        labels.view(-1)[p + (1 if helper == "hf" else 0)] = int(next(i for i in range(V) if i not in row.tolist()))


@pytest.mark.parametrize("case", ["outside", "missing"])
@pytest.mark.parametrize("helper", HELPERS)
def test_a_bad_token_is_named_as_an_expression_of_the_batch_that_gives_its_value(helper, case):
    # the kernel's checks index its flat views (`sampled[4]`, `support[4, 0]`); through a helper the
    # message spells them as the batch the caller holds, and evaluating that expression gives the value
    import re
    make, call, _ = HELPERS[helper]
    batch, hidden = make()
    p = _first_active(batch, helper)
    _plant(batch, helper, case, p)
    with pytest.raises(PacktoolInputError) as e:
        call(batch, hidden, torch.randn(V, H))
    msg = str(e.value)
    assert msg.startswith(call.__name__ + ": batch") and "sampled[" not in msg, msg
    m = re.match(r"\w+: (batch.*?)\[(\d+)(?:, (\d+))?\] = (-?\d+) ", msg)
    expr, n, k, value = m.group(1), int(m.group(2)), m.group(3), int(m.group(4))
    assert n == p
    got = eval(expr, {"batch": batch})[(n, int(k)) if k is not None else n]  # noqa: S307 (the test's own text)
    assert int(got) == value
