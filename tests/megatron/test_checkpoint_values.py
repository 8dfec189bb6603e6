"""S35-9: every value `--load` goes by is held to what `save_checkpoint` writes, and the saved
shape to the saved weights, before any model is built: a damaged or edited value is one line
naming the checkpoint and the key (exit 2) at once. A `layers: 10**6` over 2 layers' weights
built a model for minutes; a step over 2^63-1 was called `start_step`; a vocab_size "x" was
printed as a tokenizer of vocab_size x."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("megatron.core")
pytest.importorskip("typer")
from megatron_runs import one_step_run  # noqa: E402, F401  (the module's fixture)
from typer.testing import CliRunner  # noqa: E402

from packtool.errors import PacktoolError  # noqa: E402
from packtool.megatron.loop import TrainConfig, train  # noqa: E402
from packtool.megatron.model import GPTShape  # noqa: E402

# the shape of one_step_run's checkpoint (megatron_runs.py): DAMAGE's lines name its sizes
SHAPE = GPTShape(layers=2, hidden=32, heads=2, ffn=64, vocab=128, max_seq=512)


def _set(key, value):
    def edit(ck):
        part, _, name = key.partition(".")
        if name:
            ck[part][name] = value
        else:
            ck[part] = value
    return edit


def _poison(part, value, every=False):
    """A non-finite value in the weights (or the fp32 masters a CUDA run saves)."""
    def edit(ck):
        if part == "master":
            ck["optimizer"]["master"] = [torch.full((4,), value)]
            return
        for k, t in ck["model"].items():
            if torch.is_tensor(t) and t.is_floating_point():
                if every:
                    t.fill_(value)
                else:
                    t.view(-1)[0] = value
                    return
    return edit


def _drop_layer(ck):
    ck["model"] = {k: v for k, v in ck["model"].items() if not k.startswith("decoder.layers.1.")}


# (edit of a good checkpoint, what the line says)
DAMAGE = {
    "layers 10**6": (_set("shape.layers", 10**6), "a model shape of 1000000 layer(s), but weights of layers 0..1 (2)"),
    "layers 3": (_set("shape.layers", 3), "a model shape of 3 layer(s), but weights of layers 0..1 (2)"),
    "a layer's weights gone": (_drop_layer, "a model shape of 2 layer(s), but weights of layers 0..0 (1)"),
    "ffn 2^30": (_set("shape.ffn", 2**30), "linear_fc1.weight is 2147483648x32 (tp 1), but its weights there are 128x32"),
    "hidden 64": (_set("shape.hidden", 64), "word_embeddings.weight is 128x64 (tp 1), but its weights there are 128x32"),
    "vocab 2^20": (_set("shape.vocab", 2**20), "word_embeddings.weight is 1048576x32 (tp 1)"),
    "kv_heads 1": (_set("shape.kv_heads", 1), "linear_qkv.weight is 64x32 (tp 1), but its weights there are 96x32"),
    "an embedding of no tensor": (_set("model.embedding.word_embeddings.weight", 5), "its weights there are none"),
    "step 10**30": (_set("step", 10**30), "holds a step of the wrong kind (1000000000000000000000000000000;"),
    "step -5": (_set("step", -5), "holds a step of the wrong kind (-5;"),
    "tp 0": (_set("tp", 0), "holds a tp of the wrong kind (0;"),
    "data a string": (_set("data", "x"), "holds a data of the wrong kind ('x';"),
    "data.vocab_size 'x'": (_set("data.vocab_size", "x"), "holds a data.vocab_size of the wrong kind ('x';"),
    "data.vocab_size 0": (_set("data.vocab_size", 0), "holds a data.vocab_size of the wrong kind (0;"),
    "data.tokenizer_sha256 5": (_set("data.tokenizer_sha256", 5), "holds a data.tokenizer_sha256 of the wrong kind (5;"),
    # weights saved by a run that diverged (S38-4: packtool saved NaN weights as a success): every
    # step of a run from them is NaN, which the run's own line would blame on --lr
    "a weight NaN": (_poison("model", float("nan")), "holds NaN or inf in 1 of its weight values"),
    "a weight -inf": (_poison("model", float("-inf")), "holds NaN or inf in 1 of its weight values"),
    "every weight NaN": (_poison("model", float("nan"), every=True), "of its weight values (saved by a run that diverged)"),
    "an fp32 master inf": (_poison("master", float("inf")), "holds NaN or inf in 4 of its weight values"),
}


@pytest.fixture(scope="module")
def app():
    from packtool.cli.app import app as packtool_app
    return packtool_app


@pytest.mark.parametrize("path", ["library", "cli"])
@pytest.mark.parametrize("case", DAMAGE)
def test_a_damaged_value_is_named_before_any_model_is_built(one_step_run, tmp_path, monkeypatch, app, path, case):
    data, good = one_step_run
    edit, said = DAMAGE[case]
    ck = torch.load(good, weights_only=True)
    edit(ck)
    (tmp_path / "ck").mkdir()
    torch.save(ck, tmp_path / "ck" / "mp_rank_00.pt")
    import packtool.megatron.loop as loop

    def built(*a, **k):
        raise AssertionError("a model was built from a damaged checkpoint")
    monkeypatch.setattr(loop, "build_gpt", built)
    if path == "library":
        with pytest.raises(PacktoolError) as e:
            train(TrainConfig(data_dir=data, steps=1, quiet=True, load=str(tmp_path / "ck")))
        msg, code = str(e.value), e.value.exit_code
    else:
        r = CliRunner().invoke(app, ["train", data, "--device", "cpu", "--steps", "1", "--load", str(tmp_path / "ck")])
        msg, code = " ".join(r.output.split()), r.exit_code
    assert code == 2 and said in msg and "mp_rank_00.pt" in msg and "start without" in msg, msg
