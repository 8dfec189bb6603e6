"""S35-1: `--load` of a checkpoint that records its tokenizer, on an output packed from token ids
(no tokenizer, no vocab_size in its manifest), holds the ids to the vocabulary the checkpoint
recorded, not to the model's padded vocabulary (its padding rows are no tokens): the ids the
manifest names are refused before any work, any other at the row group that holds it, before
any of its rows is trained on; and a note says the tokens cannot be compared with the
checkpoint's tokenizer."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("megatron.core")
pytest.importorskip("typer")
from megatron_slabs import greedy_bins, random_sequences, write_slab_dir  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.errors import PacktoolConfigError  # noqa: E402
from packtool.megatron.loop import TrainConfig, train  # noqa: E402
from packtool.megatron.model import GPTShape  # noqa: E402
from packtool.slabs.format import read_manifest, write_manifest  # noqa: E402

RECORDED = 100  # the checkpoint's tokenizer's vocab_size: the model pads it to 128
SHAPE = GPTShape(layers=1, hidden=32, heads=2, ffn=64, vocab=128, max_seq=512)
ALIGN = Alignment(capacity=64)


def _data(root, name, top=None, **tok):
    """Slabs of ids below RECORDED; `top`: one real token raised to it; `tok`: the manifest's
    tokenizer block (None: a tokenizer of vocab_size RECORDED, sha256 'a'*64)."""
    seqs = [(ids % (RECORDED - 1) + 1, m) for ids, m in random_sequences(12, 3, 30, seed=8)]
    if top is not None:
        seqs[0][0][1] = top
    d = str(write_slab_dir(str(root / name), seqs, greedy_bins(seqs, ALIGN), ALIGN))
    m = read_manifest(d)
    m["tokenizer"] = tok if name != "base" else {**m["tokenizer"], "vocab_size": RECORDED, "sha256": "a" * 64,
                                                 "path": "tok/a/tokenizer.json"}
    write_manifest(d, m)
    return d


@pytest.fixture(scope="module")
def ck(tmp_path_factory):
    root = tmp_path_factory.mktemp("tokids")
    train(TrainConfig(data_dir=_data(root, "base"), shape=SHAPE, steps=1, quiet=True, save=str(root / "ck")))
    return str(root / "ck")


@pytest.fixture(scope="module")
def app():
    from packtool.cli.app import app as packtool_app
    return packtool_app


PATHS = {
    "library": lambda d, ck, app: train(TrainConfig(data_dir=d, steps=1, quiet=True, load=ck)),
    "cli": lambda d, ck, app: CliRunner().invoke(app, ["train", d, "--device", "cpu", "--steps", "1", "--load", ck]),
}


def _outcome(path, data, ck, app):
    """(error line or None, notes said)."""
    from packtool import notes
    start = notes.mark()
    try:
        got = PATHS[path](data, ck, app)
    except PacktoolConfigError as e:
        return str(e), notes.since(start)
    if path == "cli" and got.exit_code:
        assert got.exit_code == 2, got.output
        return " ".join(l for l in got.output.split("\n") if l.startswith("error:")), notes.since(start)
    return None, notes.since(start)


# outputs whose ids the recorded vocabulary refuses: (manifest's tokenizer block, raised id, said)
OVER = {
    "a token id between the recorded and the padded vocabulary": ({}, 110, "token id 110 is not below the vocabulary 100"),
    "the last id of the padding": ({}, 127, "token id 127 is not below the vocabulary 100"),
    # the manifest says it: refused at start (check_resumed_data), no model built
    "a manifest of a larger vocabulary": ({"pad_id": 0, "eos_id": None, "bos_id": None, "vocab_size": 120,
                                           "sha256": "a" * 64}, None, "holds tokenizer ? (sha256 aaaaaaaaaaaa, vocab_size 120)"),
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", OVER)
def test_ids_over_the_recorded_vocabulary_are_refused(ck, app, tmp_path, monkeypatch, path, case):
    tok, top, said = OVER[case]
    built = []
    import packtool.megatron.loop as loop
    real_build = loop.build_gpt
    monkeypatch.setattr(loop, "build_gpt", lambda *a, **k: built.append(1) or real_build(*a, **k))
    msg, _ = _outcome(path, _data(tmp_path, "ids", top=top, **tok), ck, app)
    assert msg and said in msg and "mp_rank_00.pt" in msg and "\n" not in msg, msg
    if top is None:  # the manifest says it: refused before any model is built
        assert not built
    else:  # held by the reader at the group that holds it (the manifest records no largest id)
        assert "slabs-00000.parquet row group 0 row 0 " in msg and "mp_rank_00.pt was trained on" in msg, msg


@pytest.mark.parametrize("path", PATHS)
def test_ids_of_the_recorded_vocabulary_resume_with_a_note(ck, app, tmp_path, path):
    msg, said = _outcome(path, _data(tmp_path, "ids", top=RECORDED - 1), ck, app)
    assert msg is None
    assert any("records no tokenizer" in n and "tokenizer a (sha256 aaaaaaaaaaaa, vocab_size 100)" in n
               for n in said), said


def test_padding_rows_of_an_older_checkpoint_stay_the_bound(ck, tmp_path):
    """A checkpoint without the record (saved before it existed) has only its padded
    vocabulary to go by: ids up to it still train."""
    import shutil

    import torch
    old = tmp_path / "old"
    shutil.copytree(ck, old)
    c = torch.load(old / "mp_rank_00.pt", weights_only=True)
    c.pop("data")
    torch.save(c, old / "mp_rank_00.pt")
    res = train(TrainConfig(data_dir=_data(tmp_path, "ids", top=127), steps=1, quiet=True,
                            load=str(old)))
    assert res.final_step == 2 and np.isfinite(res.records[-1].loss)
