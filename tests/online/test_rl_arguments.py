"""The RL functions' arguments, as a class (packtool/kernels/args.py is their one owner): every
function x every bad argument is one PacktoolInputError naming the argument, before any work,
never a silent wrong result (a loss over 0 tokens, a clip range that zeroes the objective, +inf or
NaN log-probs of a tiny temperature) nor torch's own words (S42-4, S42-5). And every refusal of the
support checks names the bad row as an expression of what the caller passed, which evaluated
gives that row (S42-2: three named "token n" of a shifted view the caller never saw).

Triton runs here under the interpreter on CPU tensors (small shapes); the GPU path's checks are
the same functions (tests/kernels/test_support_logprob_gpu.py).
"""
import math
import re
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
if torch.cuda.is_available():  # tests/conftest.py sets the interpreter only where no GPU is
    # setting it here made every later Triton kernel in the process interpreted (67 GPU tests failed)
    pytest.skip("Triton-interpreter test on CPU tensors: a process with CUDA runs compiled kernels; "
                "the same checks on the GPU path: tests/kernels/test_support_logprob_gpu.py", allow_module_level=True)

from packtool.errors import PacktoolInputError  # noqa: E402
from packtool.kernels.lm_head import fused_linear_logprobs_entropy  # noqa: E402
from packtool.kernels.support_logprob import support_logprob  # noqa: E402
from packtool.online.rl import clipped_policy_loss  # noqa: E402
from packtool.online.support import support_logprobs_hf, support_logprobs_thd  # noqa: E402

T, H, V, K = 6, 8, 50, 4
TARGET = 2  # the flat position every planted fault sits at (a loss target on every path)


def _rows(sampled):
    """[T, K] support rows: the sampled id first, two distinct others, -1 padding."""
    return torch.stack([torch.tensor([s, (s + 11) % V, (s + 23) % V, -1]) for s in sampled.tolist()])


def _inputs():
    g = torch.Generator().manual_seed(0)
    return torch.randn(T, H, generator=g), torch.randn(V, H, generator=g), torch.tensor([3, 8, 13, 21, 34, 40])


# Each support function with what it was given, the names its messages use for the flat views
# (evaluated against `ns`), and the caller prefix of its messages.
def _direct(shape):
    def make(dtype=torch.int64):
        h, w, s = _inputs()
        sup = _rows(s).to(dtype)
        ns = {"sampled": s.reshape(shape), "support": sup.reshape(*shape, K), "loss_mask": torch.ones(shape)}
        flat = "" if len(shape) == 1 else ".flatten()"
        names = {"sampled": f"sampled{flat}", "support": "support" + ("" if len(shape) == 1 else ".flatten(0, -2)"),
                 "loss_mask": f"loss_mask{flat}"}
        call = lambda **kw: support_logprob(h.reshape(*shape, H), w, ns["sampled"], ns["support"],  # noqa: E731
                                            loss_mask=ns["loss_mask"], **kw)
        return call, ns, names, "", (ns["sampled"], ns["support"])
    return make


def _thd(dtype=torch.int64):
    h, w, s = _inputs()
    labels, sup = s[None].clone(), _rows(s)[None].to(dtype)
    weight = torch.ones(1, T)
    weight[0, -1] = 0
    b = SimpleNamespace(labels=labels, side_targets={"support": sup}, loss_weight=weight)
    names = {"sampled": "batch.labels.flatten()", "support": "batch.side_targets['support'].flatten(0, -2)",
             "loss_mask": "batch.loss_weight.flatten()"}
    return (lambda **kw: support_logprobs_thd(b, h[:, None], w, **kw)), {"batch": b}, names, \
        "support_logprobs_thd: ", (labels, sup)


def _hf(dtype=torch.int64):
    h, w, s = _inputs()
    labels = torch.cat([torch.tensor([-100]), s[:-1]])[None].clone()  # position p scores labels[p + 1]
    sup = torch.cat([_rows(s[:-1]), torch.full((1, K), -1)])[None].to(dtype)
    b = {"labels": labels, "shift_support": sup}
    names = {"sampled": "batch['labels'].flatten()[1:]", "support": "batch['shift_support'].flatten(0, -2)",
             "loss_mask": "batch['labels'].flatten()[1:]"}
    return (lambda **kw: support_logprobs_hf(b, h[None], w, **kw)), {"batch": b}, names, \
        "support_logprobs_hf: ", (labels, sup)


SUPPORT = {"support_logprob": _direct((T,)), "support_logprob[1, T]": _direct((1, T)),
           "support_logprobs_thd": _thd, "support_logprobs_hf": _hf}


def _sampled_at(which, sampled, n):
    """The flat position n's sampled id, in the tensor the caller passed."""
    return sampled.flatten()[n + 1] if which == "support_logprobs_hf" else sampled.flatten()[n]


def _plant(which, case, sampled, support):
    """Plant `case` at TARGET in the tensors the caller passed; the message then names the row."""
    rows = support.reshape(-1, K)  # a view: writes reach the caller's tensor
    s = int(_sampled_at(which, sampled, TARGET))
    if case == "outside":
        rows[TARGET, 1] = V
    elif case == "gap":
        rows[TARGET] = torch.tensor([s, -1, 7, -1])
    elif case == "repeated":
        rows[TARGET] = torch.tensor([s, 7, 7, -1])
    elif case == "missing":
        rows[TARGET] = torch.tensor([5, 6, 7, -1])
    elif case == "empty":
        rows[TARGET] = -1


# case -> (the message after the prefix, as a regex over the names; what the named row must show)
VERDICTS = {
    "outside": (r"{support}\[2, 1\] = 50 is outside the vocabulary \[0, 50\); -1 is the only padding value$",
                lambda ev, n: ev(f"{n['support']}[2, 1]") == V),
    "gap": (r"{support}\[2, 2\] = 7 follows -1 padding in its row: padding must trail the candidates$",
            lambda ev, n: ev(f"{n['support']}[2, 2]") == 7 and ev(f"{n['support']}[2, 1]") == -1),
    "repeated": (r"{support}\[2\] holds id 7 twice \(columns 1 and 2\): candidates must be distinct$",
                 lambda ev, n: ev(f"{n['support']}[2]").tolist().count(7) == 2),
    "missing": (r"{sampled}\[2\] = \d+ is not among its support row's candidates \({support}\[2\]\): the sampled "
                r"id must be in its row exactly once$",
                lambda ev, n: int(ev(f"{n['sampled']}[2]")) not in ev(f"{n['support']}[2]").tolist()),
    "empty": (r"{support}\[2\] is empty \(all -1\), but {loss_mask}\[2\] makes that token a loss target: record "
              r"the sampler's candidates for it or mask it out; no full-vocabulary fallback$",
              lambda ev, n: (ev(f"{n['support']}[2]") == -1).all() and ev(f"{n['loss_mask']}[2]") not in (0, -100)),
}


@pytest.mark.parametrize("impl", ["torch", "gather"])
@pytest.mark.parametrize("case", sorted(VERDICTS))
@pytest.mark.parametrize("which", sorted(SUPPORT))
def test_every_support_verdict_names_the_row_as_an_expression_of_what_was_passed_s42_2(which, case, impl):
    call, ns, names, prefix, (sampled, support) = SUPPORT[which]()
    _plant(which, case, sampled, support)
    with pytest.raises(PacktoolInputError) as e:
        call(impl=impl)
    msg = str(e.value)
    pattern, shows = VERDICTS[case]
    assert re.match("^" + re.escape(prefix) + pattern.format(**{k: re.escape(v) for k, v in names.items()}), msg), msg
    assert "token 2" not in msg and "\n" not in msg
    assert shows(lambda expr: eval(expr, {}, ns), names), msg  # the expression gives the row at fault


@pytest.mark.parametrize("which", sorted(SUPPORT))
def test_a_sampled_id_past_the_supports_int32_is_named_as_passed(which):
    # the sixth verdict: a sampled id an int32 support cannot hold (it was compared as another id)
    call, ns, names, prefix, (sampled, support) = SUPPORT[which](torch.int32)
    sampled.view(-1)[TARGET + (which == "support_logprobs_hf")] = (1 << 32) + 5
    with pytest.raises(PacktoolInputError) as e:
        call(impl="torch")
    msg = str(e.value)
    assert msg.startswith(f"{prefix}{names['sampled']}[2] = {(1 << 32) + 5} does not fit"), msg
    assert eval(f"{names['sampled']}[2]", {}, ns) == (1 << 32) + 5


# --- scalar and tensor arguments of every support function ------------------------------------

BAD_TEMPERATURE = (0, -1.0, math.nan, math.inf, "1", True, None, 1e-7, 1e-30, 1e-38, 1e-40, 1e-300)
BAD_SUPPORT_KW = ([("temperature", v) for v in BAD_TEMPERATURE]
                  + [(k, v) for k in ("entropy", "deterministic", "reduce_grad_hidden", "main_grad")
                     for v in ("no", 1, None)]
                  + [("impl", v) for v in ("cuda", None, 1)] + [("vocab_start", v) for v in (1.5, "2", True, -1)])


@pytest.mark.parametrize("name,value", BAD_SUPPORT_KW, ids=[f"{k}={v!r}" for k, v in BAD_SUPPORT_KW])
@pytest.mark.parametrize("which", sorted(SUPPORT))
def test_every_support_function_refuses_a_bad_keyword_naming_it(which, name, value):
    # temperature 1e-40 gave +inf and NaN log-probs (1/T past float32), 1e-38 -inf; entropy='no' was
    # True; impl=None ran the checks first and failed after them
    call, *_ = SUPPORT[which]()
    with pytest.raises(PacktoolInputError, match=rf"^{name}={re.escape(repr(value))}: expected "):
        call(**{name: value})


def test_temperature_at_the_bound_and_above_is_finite():
    for which in sorted(SUPPORT):
        call, *_ = SUPPORT[which]()
        for t in (1e-6, 1e-3, 0.7, 1.0, 50.0, torch.tensor(0.5)):
            lp, ent, valid = call(temperature=t, entropy=True, impl="torch")
            assert torch.isfinite(lp).all() and torch.isfinite(ent).all() and (lp <= 0).all(), (which, t)


@pytest.mark.parametrize("impl", ["torch", "fused"])
@pytest.mark.parametrize("t", [1e-7, 1e-40, 1e-300])
def test_the_lm_heads_logprobs_hold_the_same_temperature_bound(impl, t):
    h, w, s = _inputs()
    with pytest.raises(PacktoolInputError, match=rf"^temperature={t!r}: expected a finite number >= 1e-06"):
        fused_linear_logprobs_entropy(h, w, s, temperature=t, impl=impl)


@pytest.mark.parametrize("arg", ["hidden", "weight"])
@pytest.mark.parametrize("entry", sorted(SUPPORT) + ["fused_linear_logprobs_entropy"])
def test_integer_hidden_or_weight_is_refused(entry, arg):
    h, w, s = _inputs()
    a = {"hidden": h, "weight": w}
    a[arg] = a[arg].long()
    if entry == "fused_linear_logprobs_entropy":
        call = lambda: fused_linear_logprobs_entropy(a["hidden"], a["weight"], s, impl="torch")  # noqa: E731
    elif entry == "support_logprobs_hf":
        call = lambda: support_logprobs_hf({"labels": s[None], "shift_support": _rows(s)[None]},  # noqa: E731
                                           a["hidden"][None], a["weight"])
    elif entry == "support_logprobs_thd":
        b = SimpleNamespace(labels=s[None], side_targets={"support": _rows(s)[None]}, loss_weight=torch.ones(1, T))
        call = lambda: support_logprobs_thd(b, a["hidden"], a["weight"])  # noqa: E731
    else:
        call = lambda: support_logprob(a["hidden"], a["weight"], s, _rows(s))  # noqa: E731
    with pytest.raises(PacktoolInputError, match=rf"^{arg} is torch.int64: expected floating-point"):
        call()


def test_hidden_on_the_meta_device_is_not_told_to_move_the_weight_there():
    h, w, s = _inputs()
    with pytest.raises(PacktoolInputError, match=r"^hidden is on the meta device, which holds no values") as e:
        support_logprob(h.to("meta"), w, s, _rows(s))
    assert "move it to meta" not in str(e.value)


# --- clipped_policy_loss ------------------------------------------------------------------------

P = 8  # positions: two segments of 4, all weights 1, A = 1, logprobs = old = 0: each token's loss is -1


def _policy():
    return {"logprobs": torch.zeros(1, P), "old_logprobs": torch.zeros(1, P), "advantages": torch.ones(1, P),
            "loss_weight": torch.ones(1, P), "segment": torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1]]),
            "seg_loss_tokens": torch.tensor([4.0, 4.0])}


def _loss(a, **kw):
    return clipped_policy_loss(a["logprobs"], a["old_logprobs"], a["advantages"], a["loss_weight"], a["segment"],
                               a["seg_loss_tokens"], **kw)


def _set(name, make):
    def plant(a):
        a[name] = make(a[name])
    return plant


# (case id, how the arguments change, extra keywords, the message's start)
POLICY_CASES = [
    ("num_loss_tokens=0", None, {"num_loss_tokens": 0},
     r"num_loss_tokens=0, but this micro-batch alone holds 8 loss tokens"),
    ("num_loss_tokens=-3", None, {"num_loss_tokens": -3}, r"num_loss_tokens=-3: expected an integer >= 0"),
    ("num_loss_tokens=2.5", None, {"num_loss_tokens": 2.5}, r"num_loss_tokens=2.5: expected an integer >= 0"),
    ("num_loss_tokens='8'", None, {"num_loss_tokens": "8"}, r"num_loss_tokens='8': expected an integer"),
    ("num_loss_tokens=True", None, {"num_loss_tokens": True}, r"num_loss_tokens=True: expected an integer"),
    ("num_sequences=1", None, {"num_sequences": 1, "aggregate": "seq-mean-token-mean"},
     r"num_sequences=1, but 2 segments of this micro-batch alone hold loss tokens"),
    ("num_sequences=1.5", None, {"num_sequences": 1.5}, r"num_sequences=1.5: expected an integer >= 0"),
    ("clip_low=-1.0", None, {"clip_low": -1.0}, r"clip_low=-1.0: expected a finite number in \[0, 1\]"),
    ("clip_low=1.5", None, {"clip_low": 1.5}, r"clip_low=1.5: expected a finite number in \[0, 1\]"),
    ("clip_low=nan", None, {"clip_low": math.nan}, r"clip_low=nan: expected a finite number"),
    ("clip_low='0.2'", None, {"clip_low": "0.2"}, r"clip_low='0.2': expected a finite number"),
    ("clip_low=True", None, {"clip_low": True}, r"clip_low=True: expected a finite number"),
    ("clip_high=nan", None, {"clip_high": math.nan}, r"clip_high=nan: expected a finite number >= 0"),
    ("clip_high=inf", None, {"clip_high": math.inf}, r"clip_high=inf: expected a finite number >= 0"),
    ("clip_high=-0.1", None, {"clip_high": -0.1}, r"clip_high=-0.1: expected a finite number >= 0"),
    ("segment holds 5", _set("segment", lambda t: torch.where(t == 1, 5, t)), {},
     r"segment.flatten\(\)\[4\] = 5, but seg_loss_tokens holds 2 segments \(indices 0..1\)"),
    ("segment holds -1", _set("segment", lambda t: torch.where(t == 1, -1, t)), {},
     r"segment.flatten\(\)\[4\] = -1, but seg_loss_tokens holds 2 segments"),
    ("segment float", _set("segment", lambda t: t.float()), {}, r"segment is torch.float32: expected integer"),
    ("segment bool", _set("segment", lambda t: t.bool()), {}, r"segment is torch.bool: expected integer"),
    ("segment list", _set("segment", lambda t: t.tolist()), {}, r"segment is a list: expected a torch.Tensor"),
    ("seg_loss_tokens short", _set("seg_loss_tokens", lambda t: t[:1]), {},
     r"segment.flatten\(\)\[4\] = 1, but seg_loss_tokens holds 1 segment \(indices 0..0\)"),
    ("seg_loss_tokens [4, 0]", _set("seg_loss_tokens", lambda t: torch.tensor([4.0, 0.0])),
     {"aggregate": "seq-mean-token-mean"},
     r"seg_loss_tokens\[1\] = 0, but the loss_weight of segment 1 sums to 4 here"),
    ("seg_loss_tokens negative", _set("seg_loss_tokens", lambda t: torch.tensor([4.0, -1.0])), {},
     r"seg_loss_tokens\[1\] = -1: expected counts >= 0"),
    ("seg_loss_tokens nan", _set("seg_loss_tokens", lambda t: torch.tensor([math.nan, 4.0])), {},
     r"seg_loss_tokens\[0\] = nan: expected counts >= 0"),
    ("seg_loss_tokens bool", _set("seg_loss_tokens", lambda t: t.bool()), {},
     r"seg_loss_tokens is torch.bool: expected loss-token counts as real numbers"),
    ("shape", _set("old_logprobs", lambda t: t[:, :5]), {}, r"logprobs, old_logprobs, advantages, loss_weight and "
     r"segment must hold one value per local position"),
] + [(f"{n} long", _set(n, lambda t: t.long()), {}, rf"{n} is torch.int64: expected floating-point log-probs")
     for n in ("logprobs", "old_logprobs")] + [
    ("advantages bool", _set("advantages", lambda t: t.bool()), {}, r"advantages is torch.bool: expected advantages"),
    ("advantages complex", _set("advantages", lambda t: t.to(torch.complex64)), {},
     r"advantages is torch.complex64: expected advantages"),
    ("loss_weight complex", _set("loss_weight", lambda t: t.to(torch.complex64)), {},
     r"loss_weight is torch.complex64: expected loss weights"),
] + [(f"{n} list", _set(n, lambda t: t.tolist()), {}, rf"{n} is a list: expected a torch.Tensor")
     for n in ("logprobs", "old_logprobs", "advantages", "loss_weight", "seg_loss_tokens")
     ] + [(f"{n} on meta", _set(n, lambda t: t.to("meta")), {}, rf"{n} is on meta but logprobs is on cpu")
          for n in ("old_logprobs", "advantages", "loss_weight", "segment", "seg_loss_tokens")]


@pytest.mark.parametrize("case,plant,kw,message", POLICY_CASES, ids=[c[0] for c in POLICY_CASES])
def test_clipped_policy_loss_refuses_every_bad_argument_naming_it_s42_4(case, plant, kw, message):
    a = _policy()
    if plant:
        plant(a)
    before = {k: v.clone() for k, v in a.items() if isinstance(v, torch.Tensor) and v.device.type != "meta"}
    with pytest.raises(PacktoolInputError, match="^" + message) as e:
        _loss(a, **kw)
    assert "\n" not in str(e.value)
    assert all(torch.equal(a[k], v) or torch.allclose(a[k], v, 0, 0, equal_nan=True)
               for k, v in before.items())  # nothing changed in place


def test_clipped_policy_loss_in_range_runs():
    a = _policy()
    assert float(_loss(a).loss) == -1.0
    assert float(_loss(a, num_loss_tokens=16).loss) == -0.5  # the step's count: two such micro-batches
    assert float(_loss(a, num_loss_tokens=torch.tensor(8)).loss) == -1.0  # an all-reduced count
    assert float(_loss(a, clip_low=0.0, clip_high=0.0).loss) == -1.0
    assert float(_loss(a, aggregate="seq-mean-token-sum", num_sequences=4).loss) == -2.0
    # a CP rank's share: its positions are some of each segment's loss tokens over all ranks
    a["seg_loss_tokens"] = torch.tensor([6.0, 9.0])
    assert float(_loss(a, aggregate="seq-mean-token-mean").loss) == pytest.approx(-(4 / 6 + 4 / 9) / 2)
    a = _policy()
    a["segment"] = a["segment"].to(torch.int16)  # a narrow index is widened, not refused by index_add
    a["loss_weight"] = a["loss_weight"].bool()
    assert float(_loss(a).loss) == -1.0
