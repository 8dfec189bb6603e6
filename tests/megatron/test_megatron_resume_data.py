"""A resumed run trains the tokens its checkpoint's embedding learned (S34-6): a checkpoint
records the tokenizer (sha256, vocab_size) of the output it trained on, and `--load` on an
output of another tokenizer or vocabulary, or with a `--vocab-size` that disagrees, is one
line naming both; an older checkpoint without the record is held to its padded vocabulary.
And `--micro-batch-tokens` below the largest slab is refused before training (S34-9): such a
slab would be a micro-batch over the budget the user set to bound memory."""
from __future__ import annotations

import shutil

import pytest
import torch

pytest.importorskip("megatron.core")
pytest.importorskip("typer")
from megatron_runs import TINY  # noqa: E402
from megatron_slabs import greedy_bins, random_sequences, write_slab_dir  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.errors import PacktoolConfigError  # noqa: E402
from packtool.megatron.dataset import PackedSlabDataset  # noqa: E402
from packtool.megatron.loop import TrainConfig, train  # noqa: E402
from packtool.megatron.model import GPTShape  # noqa: E402
from packtool.slabs.format import read_manifest, write_manifest  # noqa: E402

SHAPE = GPTShape(layers=1, hidden=32, heads=2, ffn=64, vocab=128, max_seq=512)
SHA_A, SHA_B = "a" * 64, "b" * 64
ALIGN = Alignment(capacity=64)


def _data(root, name, ids=False, scale=1, **tok):
    """The same slabs under a manifest whose tokenizer block has `tok`; `ids`: packed from token
    ids ({}); `scale`: every id times it (above the vocabulary of 128)."""
    seqs = [(i * scale, m) for i, m in random_sequences(12, 3, 30, seed=8)]
    d = str(write_slab_dir(str(root / name), seqs, greedy_bins(seqs, ALIGN), ALIGN))
    m = read_manifest(d)
    m["tokenizer"].update({"sha256": SHA_A, "path": "tok/a/tokenizer.json", **tok})
    if ids:
        m["tokenizer"] = {}
    write_manifest(d, m)
    return d


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(folder of data variants, checkpoint of a 1-step run on the base data, an older one without the record)."""
    root = tmp_path_factory.mktemp("resume")
    base = _data(root, "base")
    train(TrainConfig(data_dir=base, shape=SHAPE, steps=1, quiet=True, save=str(root / "ck")))
    shutil.copytree(root / "ck", root / "old")
    ck = torch.load(root / "old" / "mp_rank_00.pt", weights_only=True)
    ck.pop("data", None)  # as saved before checkpoints recorded their tokenizer
    torch.save(ck, root / "old" / "mp_rank_00.pt")
    return root, base


@pytest.fixture(scope="module")
def app():
    from packtool.cli.app import app as packtool_app
    return packtool_app


# every way the output's tokens can differ from the checkpoint's
OTHER = {
    "another tokenizer, same vocab": (dict(sha256=SHA_B, path="tok/b/tokenizer.json"), None, "tokenizer b"),
    "a larger vocab": (dict(vocab_size=300), None, "vocab_size 300"),
    "a vocab of the same padded size": (dict(vocab_size=127), None, "vocab_size 127"),
    "token ids, another --vocab-size": (dict(ids=True), 200, "vocab_size=200"),
}


@pytest.mark.parametrize("case", OTHER)
def test_load_refuses_an_output_of_other_tokens(run, tmp_path, case):
    root, _ = run
    tok, vocab, said = OTHER[case]
    data = _data(tmp_path, "other", **tok)
    with pytest.raises(PacktoolConfigError) as e:
        train(TrainConfig(data_dir=data, steps=1, quiet=True, load=str(root / "ck"), vocab_size=vocab))
    msg = str(e.value)
    assert "mp_rank_00.pt" in msg and said in msg and "\n" not in msg and e.value.exit_code == 2, msg


@pytest.mark.parametrize("ck, tok, vocab", [
    ("ck", {}, None), ("ck", dict(ids=True), 128),
    ("old", {}, None), ("old", dict(vocab_size=127), None),  # older: only its padded vocabulary to go by
])
def test_load_resumes_on_the_same_tokens(run, tmp_path, ck, tok, vocab):
    root, _ = run
    data = _data(tmp_path, "same", **tok)
    res = train(TrainConfig(data_dir=data, steps=1, quiet=True, load=str(root / ck), vocab_size=vocab))
    assert res.final_step == 2


def test_an_older_checkpoint_is_held_to_its_padded_vocabulary(run, tmp_path):
    root, _ = run
    data = _data(tmp_path, "big", vocab_size=300)
    with pytest.raises(PacktoolConfigError, match="older checkpoint.*pads to 384"):
        train(TrainConfig(data_dir=data, steps=1, quiet=True, load=str(root / "old")))


@pytest.mark.parametrize("tok, flag, said", [
    ({}, "7", "--vocab-size 7 disagrees with tokenizer.vocab_size 128"),
    (dict(ids=True), "200", "--vocab-size 200 (the checkpoint has 128)"),
])
def test_cli_refuses_a_vocab_size_beside_load_that_disagrees(run, tmp_path, app, tok, flag, said):
    root, _ = run
    data = _data(tmp_path, "cli", **tok)
    r = CliRunner().invoke(app, ["train", data, "--device", "cpu", "--steps", "1", "--load", str(root / "ck"),
                                 "--vocab-size", flag])
    assert r.exit_code == 2 and said in " ".join(r.output.split()), r.output


# every path that trains token ids (no tokenizer, so nothing checked them at pack) above the model's vocabulary
ABOVE = {
    "library, shape": lambda d, ck, app: train(TrainConfig(data_dir=d, shape=SHAPE, steps=1, quiet=True)),
    "library, load": lambda d, ck, app: train(TrainConfig(data_dir=d, steps=1, quiet=True, load=ck)),
    "cli, load": lambda d, ck, app: CliRunner().invoke(app, ["train", d, "--device", "cpu", "--steps", "1",
                                                             "--load", ck]),
    "cli, --vocab-size": lambda d, ck, app: CliRunner().invoke(app, ["train", d, "--device", "cpu", "--steps", "1",
                                                                     "--vocab-size", "128"]),
}


@pytest.mark.parametrize("path", ABOVE)
def test_token_ids_above_the_model_vocabulary_are_refused(run, tmp_path, app, path):
    root, _ = run
    data = _data(tmp_path, "big_ids", ids=True, scale=3)
    try:
        got = ABOVE[path](data, str(root / "ck"), app)
    except PacktoolConfigError as e:
        msg = str(e)
    else:
        assert got.exit_code == 2, got.output
        msg = " ".join(got.output.split())
    # held by the reader at the row group that holds it (S35-3), before any of its rows is trained on
    assert "slabs-00000.parquet row group 0 row " in msg and "is not below" in msg, msg


def _largest(data) -> int:
    ds = PackedSlabDataset(data)
    return int(ALIGN.bin_footprint(ds.index.stripped).max())


def _budget_paths(data, budget, app):
    return {
        "dataset": lambda: PackedSlabDataset(data, micro_batch_tokens=budget),
        "train": lambda: train(TrainConfig(data_dir=data, shape=SHAPE, steps=1, quiet=True, micro_batch_tokens=budget)),
        "cli": lambda: CliRunner().invoke(app, ["train", data, *TINY, "--steps", "1",
                                                "--micro-batch-tokens", str(budget)]),
    }


@pytest.mark.parametrize("path", ["dataset", "train", "cli"])
@pytest.mark.parametrize("below", [1, 8])
def test_micro_batch_tokens_below_the_largest_slab_is_refused(run, app, path, below):
    _, data = run
    big = _largest(data)
    assert big - below >= ALIGN.t  # above the per-slab multiple: the new check, not the old one
    go = _budget_paths(data, big - below, app)[path]
    if path == "cli":
        r = go()
        out = " ".join(r.output.split())
        assert r.exit_code == 2 and f"--micro-batch-tokens {big - below} is below the largest slab, {big}" in out, out
        return
    with pytest.raises(PacktoolConfigError, match=f"micro_batch_tokens={big - below} is below the largest slab, {big}"):
        go()


@pytest.mark.parametrize("path", ["dataset", "cli"])
def test_micro_batch_tokens_of_the_largest_slab_trains(run, app, path):
    _, data = run
    got = _budget_paths(data, _largest(data), app)[path]()
    if path == "cli":
        assert got.exit_code == 0, got.output
