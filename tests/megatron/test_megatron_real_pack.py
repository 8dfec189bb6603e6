"""The megatron consumer on the real packer's output (`packtool.packing.pack`) from fixtures."""
from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("megatron.core")

from packtool.align import Alignment  # noqa: E402
from packtool.megatron.dataset import PackedSlabDataset  # noqa: E402
from packtool.megatron.loop import TrainConfig, train  # noqa: E402
from packtool.megatron.model import GPTShape, padded_vocab  # noqa: E402
from packtool.packing import pack  # noqa: E402
from packtool.planning.core import PackingConfig  # noqa: E402
from packtool.tokenize.config import TokenizeConfig  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "fixtures", "data", "gsm8k_train_200.jsonl")
TOK = os.path.join(ROOT, "fixtures", "tokenizers", "gpt2", "tokenizer.json")


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    if not (os.path.exists(DATA) and os.path.exists(TOK)):
        pytest.skip("fixtures/data/gsm8k_train_200.jsonl or the gpt2 tokenizer is missing")
    d = tmp_path_factory.mktemp("real")
    out = str(d / "packed")
    res = pack([DATA], Alignment(cp=2, fp8="tensorwise", capacity=1024),
               PackingConfig(algorithm="bfd"),
               TokenizeConfig(tokenizer=TOK, prompt_field="question", response_field="answer"),
               output=out, cache_dir=str(d / "cache"))
    return out, res


def test_loss_tokens_and_cp_slices_match_the_manifest(packed):
    out, res = packed
    full = PackedSlabDataset(out, cp_size=1, seed=0)
    steps = list(full.steps(max_steps=full.steps_per_epoch()))
    assert sum(s.loss_tokens for s in steps) == res.loss_tokens
    assert sum(s.real_tokens for s in steps) == int(full.index.num_tokens.sum())
    ranks = [list(PackedSlabDataset(out, cp_rank=r, cp_size=2, seed=0).steps(max_steps=len(steps)))
             for r in range(2)]
    for s, a, b in zip(steps, *ranks):
        for mf, m0, m1 in zip(s.micro_batches, a.micro_batches, b.micro_batches):
            T = mf.input_ids.shape[1]
            assert m0.input_ids.shape[1] == m1.input_ids.shape[1] == T // 2
            w = float(m0.loss_weight.sum() + m1.loss_weight.sum())
            assert w == float(mf.loss_weight.sum())  # the shift is done before slicing
            both = np.sort(np.concatenate([m0.input_ids[0].numpy(), m1.input_ids[0].numpy()]))
            assert (both == np.sort(mf.input_ids[0].numpy())).all()


def test_trains_on_real_slabs_on_cpu(packed):
    out, _ = packed
    vocab = padded_vocab(PackedSlabDataset(out, cp_size=1).manifest.vocab_size)
    res = train(TrainConfig(data_dir=out, shape=GPTShape(layers=1, hidden=32, heads=2, ffn=64,
                                                         vocab=vocab),
                            cp=1, steps=2, lr=1e-3, quiet=True))
    assert [r.step for r in res.records] == [0, 1]
    assert all(np.isfinite(r.loss) and r.loss > 0 for r in res.records)
