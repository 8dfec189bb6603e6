"""Every tensor argument of packtool.kernels' public entry points is checked before any work
(packtool/kernels/args.py): a float, bool or complex id tensor, a tensor of the wrong shape or on
another device is one PacktoolInputError naming the argument, never a silent cast (1.7 -> 1,
True -> 1), torch's or Triton's own words, or a read past a tensor's end (S38-1, S38-2).

Each entry point runs on every impl it has (the Triton ones under the interpreter on CPU); another
device is stood in for by `meta` (the check compares devices; a CUDA run saw the same on an H200).
"""

import pytest

torch = pytest.importorskip("torch")

from packtool.errors import PacktoolInputError
from packtool.kernels import lm_head as L
from packtool.kernels import reference as R
from packtool.kernels.support_logprob import support_logprob

# CPU tensors under the Triton interpreter, which tests/conftest.py turns on where no GPU is; where one is,
# the compiled kernels are tested in the *_gpu.py modules (the interpreter cannot be a per-module choice:
# set at import it leaked into every later module of the process, stop 43's 67 GPU failures).
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter tests on CPU tensors; see *_gpu.py")

N, H, V, K = 6, 8, 50, 4


def _args():
    g = torch.Generator().manual_seed(0)
    h, w = torch.randn(N, H, generator=g), torch.randn(V, H, generator=g)
    t = torch.randint(0, V, (N,), generator=g)
    sup = torch.full((N, K), -1)
    sup[:, 0] = t
    return {"hidden": h, "weight": w, "targets": t, "loss_weights": torch.ones(N), "sampled": t,
            "support": sup, "loss_mask": torch.ones(N)}


def _ce(impl, reduction="sum"):
    return lambda a: L.fused_linear_cross_entropy(a["hidden"], a["weight"], a["targets"], a["loss_weights"],
                                                  reduction, impl=impl)


def _lp(impl):
    return lambda a: L.fused_linear_logprobs_entropy(a["hidden"], a["weight"], a["targets"],
                                                     loss_weights=a["loss_weights"], impl=impl)


def _sup(impl):
    return lambda a: support_logprob(a["hidden"], a["weight"], a["sampled"], a["support"],
                                     loss_mask=a["loss_mask"], impl=impl)


# every public entry point x impl, with the tensor arguments it takes
ENTRIES = {
    "cross_entropy[fused]": (_ce("fused"), ("hidden", "weight", "targets", "loss_weights")),
    "cross_entropy[fused,none]": (_ce("fused", "none"), ("hidden", "weight", "targets", "loss_weights")),
    "cross_entropy[torch]": (_ce("torch"), ("hidden", "weight", "targets", "loss_weights")),
    "logprobs_entropy[fused]": (_lp("fused"), ("hidden", "weight", "targets", "loss_weights")),
    "logprobs_entropy[torch]": (_lp("torch"), ("hidden", "weight", "targets", "loss_weights")),
    "torch_reference_cross_entropy": (
        lambda a: R.torch_reference_cross_entropy(a["hidden"], a["weight"], a["targets"]), ("targets",)),
    "torch_reference_logprobs_entropy": (
        lambda a: R.torch_reference_logprobs_entropy(a["hidden"], a["weight"], a["targets"]), ("targets",)),
    "torch_reference_support_logprob": (
        lambda a: R.torch_reference_support_logprob(a["hidden"], a["weight"], a["sampled"], a["support"]),
        ("sampled", "support")),
    **{f"support_logprob[{impl}]": (_sup(impl), ("hidden", "weight", "sampled", "support", "loss_mask"))
       for impl in ("auto", "gather", "dense", "union", "torch")},
}
IDS = {"targets", "sampled", "support"}
NOT_IDS = (torch.float32, torch.float64, torch.bfloat16, torch.bool, torch.complex64)


def _fails(entry, args, *words):
    with pytest.raises(PacktoolInputError) as e:
        ENTRIES[entry][0](args)
    msg = str(e.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg, msg


ID_CASES = [(e, a) for e, (_, names) in ENTRIES.items() for a in names if a in IDS]


@pytest.mark.parametrize("dtype", NOT_IDS, ids=str)
@pytest.mark.parametrize("entry,arg", ID_CASES, ids=[f"{e}-{a}" for e, a in ID_CASES])
def test_an_id_tensor_that_is_not_integer_is_refused_naming_it(entry, arg, dtype):
    a = _args()
    a[arg] = a[arg].to(dtype)
    _fails(entry, a, f"{arg} is {dtype}", "expected integer")


DEVICE_CASES = [(e, a) for e, (_, names) in ENTRIES.items() for a in names
                if a != "hidden" and not e.startswith("torch_reference")]


@pytest.mark.parametrize("entry,arg", DEVICE_CASES, ids=[f"{e}-{a}" for e, a in DEVICE_CASES])
def test_a_tensor_on_another_device_than_hidden_is_refused_naming_it(entry, arg):
    a = _args()
    a[arg] = a[arg].to("meta")
    _fails(entry, a, f"{arg} is on meta but hidden is on cpu")


SHAPED = [(e, a) for e, (_, names) in ENTRIES.items() for a in names
          if a in ("targets", "loss_weights", "sampled", "loss_mask") and not e.startswith("torch_reference")]


@pytest.mark.parametrize("shape", [(2,), (N, 2), (N + 1,)], ids=str)
@pytest.mark.parametrize("entry,arg", SHAPED, ids=[f"{e}-{a}" for e, a in SHAPED])
def test_a_per_token_tensor_of_another_shape_is_refused_naming_it(entry, arg, shape):
    # loss_mask was read past its end by the checks' Triton pass (S38-2): a mask of 3 for 256 tokens ran
    a = _args()
    a[arg] = torch.ones(shape, dtype=a[arg].dtype)
    _fails(entry, a, arg, f"{tuple(shape)}", "leading shape")


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e.startswith("support_logprob")])
def test_support_with_no_candidate_column_is_refused_naming_k(entry):
    a = _args()
    a["support"] = torch.empty(N, 0, dtype=torch.long)
    _fails(entry, a, f"support {(N, 0)}", "K = 0")


@pytest.mark.parametrize("entry,arg", [(e, a) for e, (_, names) in ENTRIES.items() for a in names
                                       if not e.startswith("torch_reference")])
def test_a_list_instead_of_a_tensor_is_refused_naming_it(entry, arg):
    a = _args()
    a[arg] = a[arg].tolist()
    _fails(entry, a, f"{arg} is a list", "torch.Tensor")


@pytest.mark.parametrize("impl", L.IMPLS)
def test_float_targets_are_refused_not_truncated_s38_1(impl):
    # the finding: targets 1.7 gave the loss of targets 1 on every impl, True that of 1
    h, w = torch.randn(N, H), torch.randn(V, H)
    for t in (torch.full((N,), 1.7), torch.full((N,), True)):
        with pytest.raises(PacktoolInputError, match=rf"^targets is {t.dtype}: expected integer token ids"):
            L.fused_linear_cross_entropy(h, w, t, impl=impl)
        with pytest.raises(PacktoolInputError, match=rf"^targets is {t.dtype}"):
            L.fused_linear_logprobs_entropy(h, w, t, impl=impl)
    assert L.fused_linear_cross_entropy(h, w, torch.full((N,), 1, dtype=torch.int32), impl=impl).isfinite()


@pytest.mark.parametrize("impl", ["auto", "gather", "torch"])
def test_the_findings_loss_mask_and_k0_s38_2(impl):
    a = _args()
    h, w, s, sup = a["hidden"], a["weight"], a["sampled"], a["support"]
    with pytest.raises(PacktoolInputError, match=r"^loss_mask \(2,\) must match hidden's leading shape \(6,\)$"):
        support_logprob(h, w, s, sup, loss_mask=torch.ones(2), impl=impl)
    with pytest.raises(PacktoolInputError, match=r"^loss_mask \(6, 2\) must match"):
        support_logprob(h, w, s, sup, loss_mask=torch.ones(N, 2), impl=impl)
    with pytest.raises(PacktoolInputError, match=r"^support \(6, 0\) holds K = 0 candidates"):
        support_logprob(h, w, s, torch.empty(N, 0, dtype=torch.long), impl=impl)
    lp, _, valid = support_logprob(h, w, s, sup, loss_mask=torch.ones(N), impl=impl)
    assert valid.all() and lp.shape == (N,)


def _scalar_call(entry, **kw):
    a = _args()
    if entry.startswith("logprobs_entropy"):
        return lambda: L.fused_linear_logprobs_entropy(a["hidden"], a["weight"], a["targets"],
                                                       impl=entry.split("[")[1][:-1], **kw)
    if entry.startswith("cross_entropy"):
        return lambda: L.fused_linear_cross_entropy(a["hidden"], a["weight"], a["targets"], impl="fused", **kw)
    return lambda: support_logprob(a["hidden"], a["weight"], a["sampled"], a["support"],
                                   impl=entry.split("[")[1][:-1], **kw)


BAD_TEMPERATURE = (0, -1.0, float("nan"), float("inf"), "1", True, None)
BAD_COUNT = (1.5, "2", True, -1)
SCALAR_CASES = (
    [(e, "temperature", v) for e in ("logprobs_entropy[fused]", "logprobs_entropy[torch]",
                                     "support_logprob[auto]", "support_logprob[torch]") for v in BAD_TEMPERATURE]
    + [(e, "chunk_rows", v) for e in ("cross_entropy", "logprobs_entropy[fused]") for v in BAD_COUNT + (0,)]
    + [(e, "vocab_start", v) for e in ("support_logprob[auto]", "support_logprob[torch]") for v in BAD_COUNT]
)


@pytest.mark.parametrize("entry,arg,value", SCALAR_CASES, ids=[f"{e}-{a}={v!r}" for e, a, v in SCALAR_CASES])
def test_a_scalar_argument_out_of_its_range_is_refused_naming_it(entry, arg, value):
    # the torch paths took temperature 0 / -1 / nan (rows of -inf, nan), inf gave uniform rows, '1' was
    # 1.0; chunk_rows 0 and -1 meant the default and 1, 1.5 and '2' were torch's TypeErrors; vocab_start
    # 1.5 was cut to 1 and 'a' was int()'s ValueError
    with pytest.raises(PacktoolInputError, match=rf"^{arg}={value!r}: expected ".replace("(", r"\(")):
        _scalar_call(entry, **{arg: value})()


def test_the_scalars_in_range_run():
    for entry in ("logprobs_entropy[fused]", "logprobs_entropy[torch]", "support_logprob[torch]"):
        _scalar_call(entry, temperature=0.7)()
    _scalar_call("cross_entropy", chunk_rows=2)()
    _scalar_call("support_logprob[auto]", vocab_start=0, temperature=torch.tensor(0.5))()
