"""packtool.hf: slabs -> transformers' padding-free batches. A tiny randomly initialised Llama
(built from a config; nothing downloaded) gives every sequence of a packed batch the same loss
and the same gradients as that sequence alone, for each attention implementation that runs on
CPU; SFTTrainer and Trainer train on packtool slabs."""
from __future__ import annotations


import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from conftest import GPT2, GSM8K  # noqa: E402
from slab_support import VOCAB, write_pack  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.errors import PacktoolConfigError, PacktoolInputError  # noqa: E402
from packtool.hf import IGNORE_INDEX, SlabCollator, SlabDataset, dp_order, needs_4d_mask  # noqa: E402
from packtool.planning.core import PackingConfig  # noqa: E402

# fp32 on CPU: a sequence's loss and gradients agree with it run alone to this tolerance
# (measured 2026-12-01, transformers 5.24.0, torch 2.13.0 CPU: losses within 1.4e-7 relative,
# gradients within 8.6e-7 of the largest entry; summation order inside the kernels)
RTOL, ATOL = 1e-5, 1e-6
IMPLS = ["eager", "sdpa", "flex_attention"]


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the H200 before a release)"))]


def tiny_llama(impl: str, vocab: int = VOCAB, seed: int = 0, device: str = "cpu"):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      head_dim=16, attn_implementation=impl)  # flex on CUDA needs head_dim >= 16
    return LlamaForCausalLM(cfg).float().eval().to(device)


@pytest.fixture(scope="module")
def slabs(tmp_path_factory):
    """Several slabs with every kind of pad: per-sequence (s=4 for cp=2), tail, and fills."""
    rng = np.random.default_rng(1)
    out, _ = write_pack(str(tmp_path_factory.mktemp("hf")), rng.integers(2, 90, 24),
                        Alignment(tp=2, cp=2, capacity=256, fixed_length=256))
    return out


def per_token_loss(logits, labels):
    """transformers' causal-LM convention: logits[i] predicts labels[i + 1]."""
    lab = torch.nn.functional.pad(labels, (0, 1), value=IGNORE_INDEX)[..., 1:]
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), lab.flatten(),
                                             ignore_index=IGNORE_INDEX, reduction="none")


def segments(batch):
    pos = batch["position_ids"][0]
    starts = torch.nonzero(pos == 0).flatten().tolist() + [pos.numel()]
    return list(zip(starts[:-1], starts[1:]))


def test_labels_follow_the_slab_loss_mask(slabs):
    ds = SlabDataset(slabs)
    feats = [ds[i] for i in range(3)]
    b = SlabCollator()(feats)
    ids, labels, pos = (b[k][0].numpy() for k in ("input_ids", "labels", "position_ids"))
    assert ids.shape == labels.shape == pos.shape and b["input_ids"].shape[0] == 1
    assert "attention_mask" not in b  # a 2D mask would switch off transformers' packing
    assert b["use_cache"] is False  # so would a KV cache (config.use_cache defaults to True)
    # pads dropped: one segment per real sequence, each as long as its real tokens
    lens = np.concatenate([f["seq_lens"][f["seq_lens"] > 0] for f in feats])
    assert [e - s for s, e in segments(b)] == lens.tolist() and ids.size == lens.sum()
    # labels: the token itself where the slab says it is a target, -100 elsewhere
    want_ids, want_lab = [], []
    for f in feats:
        cu = f["cu_seqlens_padded"]
        for k, n in enumerate(f["seq_lens"]):
            seg = slice(cu[k], cu[k] + n)
            want_ids.append(f["input_ids"][seg])
            want_lab.append(np.where(f["loss_mask"][seg] == 1, f["input_ids"][seg], IGNORE_INDEX))
    assert np.array_equal(ids, np.concatenate(want_ids))
    assert np.array_equal(labels, np.concatenate(want_lab))
    assert (labels[pos == 0] == IGNORE_INDEX).all()
    assert (labels != IGNORE_INDEX).sum() == sum(int(f["loss_mask"].sum()) for f in feats)
    # keep_pads: the slab's physical layout, pads in their segment and never a target
    kp = SlabCollator(keep_pads=True, flash_kwargs=True, seq_idx=True)(feats)
    pad_id = ds.manifest.pad_id
    assert kp["input_ids"].shape[1] == sum(f["input_ids"].size for f in feats)
    assert kp["cu_seq_lens_q"].tolist() == [0] + np.cumsum(
        [e - s for s, e in segments(kp)]).tolist() and kp["max_length_q"] == max(e - s for s, e in segments(kp))
    assert (kp["labels"] != IGNORE_INDEX).sum() == (b["labels"] != IGNORE_INDEX).sum()
    pads = kp["input_ids"][0].numel() - ids.size
    assert pads > 0 and int((kp["input_ids"][0] == pad_id).sum()) >= pads


def _check_equivalence(model, batch, with_grads: bool, bounds=None, max_segments=None, call_kw=None,
                       alone_impl=None):
    """Each segment's summed loss (and its gradient) vs the segment run alone (through
    `alone_impl`'s attention when given: any exact attention scores a lone sequence alike)."""
    params = [p for p in model.parameters() if p.requires_grad]
    kw = {k: v for k, v in batch.items() if k != "labels"}  # use_cache=False included
    call_kw = call_kw or {}
    tok = per_token_loss(model(**kw, **call_kw).logits, batch["labels"])
    if alone_impl:  # transformers reads the implementation from the config at each forward
        model.config._attn_implementation = alone_impl
    diffs = []
    for k, (s, e) in enumerate((bounds or segments(batch))[:max_segments]):
        alone = per_token_loss(model(input_ids=batch["input_ids"][:, s:e], **call_kw).logits,
                               batch["labels"][:, s:e]).sum()
        packed = tok[s:e].sum()
        torch.testing.assert_close(packed, alone, rtol=RTOL, atol=ATOL)
        if with_grads and k < 4:
            g_packed = torch.autograd.grad(packed, params, retain_graph=True)
            g_alone = torch.autograd.grad(alone, params)
            for a, b in zip(g_packed, g_alone):
                torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL)
        diffs.append(float(abs(packed - alone).detach()))
    return diffs


def _call_kw(impl, device):
    # flex_attention on CUDA: a segment run alone is a short query, for which Inductor picks its
    # flex_decoding template, and in fp32 (torch 2.11, H200) none of that template's configs
    # compiles (NoValidChoicesError); the general flex_attention kernel runs every length
    if impl == "flex_attention" and device == "cuda":
        return {"kernel_options": {"FORCE_USE_FLEX_ATTENTION": True}}
    return {}


def _model_or_skip(impl, device="cpu"):
    try:
        m = tiny_llama(impl, device=device)
        with torch.no_grad():
            m(input_ids=torch.tensor([[5, 6, 7, 8]], device=device),
              position_ids=torch.tensor([[0, 1, 0, 1]], device=device), **_call_kw(impl, device))
    except Exception as e:  # an implementation this machine/transformers cannot run
        pytest.skip(f"attn_implementation={impl!r} does not run here: {type(e).__name__}: {e}")
    return m


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("impl", IMPLS)
def test_packed_losses_and_grads_equal_each_sequence_alone(slabs, impl, device, monkeypatch):
    if device == "cuda":  # fp32 matmuls on the GPU stay fp32: no TF32 rounding in the comparison
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    if impl == "flex_attention" and device == "cuda":
        # the check takes several gradients of one packed forward (retain_graph=True), which a
        # compiled backward that donates its buffers refuses (torch 2.11, H200)
        import torch._functorch.config as fc
        monkeypatch.setattr(fc, "donated_buffer", False)
    # flex on CPU compiles per shape (minutes in a fresh CI): no separate probe call there
    model = tiny_llama(impl) if impl == "flex_attention" and device == "cpu" else _model_or_skip(impl, device)
    ds = SlabDataset(slabs)
    # positions alone where this transformers isolates segments by them, else the 4D mask
    batch = SlabCollator(mask_4d=needs_4d_mask(model))([ds[i] for i in range(3)])  # 3 slabs, [1, T]
    batch = {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}
    assert len(segments(batch)) >= 6
    if impl == "flex_attention" and device == "cpu":  # no FlexAttention backward on CPU: losses
        with torch.no_grad():  # only; each segment alone through sdpa, as every new length would
            try:  # compile flex again (the packed forward is the one flex compile)
                _check_equivalence(model, batch, with_grads=False, max_segments=4, alone_impl="sdpa")
            except (RuntimeError, NotImplementedError) as e:  # torch._dynamo/inductor cannot run here
                if "flex" not in repr(e).lower() and "inductor" not in repr(e).lower():
                    raise
                pytest.skip(f"flex_attention does not run here: {type(e).__name__}: {e}")
        return
    _check_equivalence(model, batch, with_grads=True, max_segments=6 if impl == "flex_attention" else None,
                       call_kw=_call_kw(impl, device))


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_4d_mask_path_is_exact_too(slabs, impl):
    """For transformers that do not read packing from positions: the explicit mask."""
    model = _model_or_skip(impl)
    ds = SlabDataset(slabs)
    batch = SlabCollator(keep_pads=True, mask_4d=True)([ds[0], ds[1]])
    assert batch["attention_mask"].shape == (1, 1, batch["input_ids"].shape[1], batch["input_ids"].shape[1])
    _check_equivalence(model, batch, with_grads=False)


def test_the_check_can_fail_positions_without_restarts_leak(slabs):
    """Control: the same batch without restarting positions lets segments see each other."""
    model = tiny_llama("sdpa")
    ds = SlabDataset(slabs)
    batch = SlabCollator()([ds[0]])
    bounds = segments(batch)
    _check_equivalence(model, batch, with_grads=False, bounds=bounds)
    batch["position_ids"] = torch.arange(batch["input_ids"].shape[1])[None]
    with pytest.raises(AssertionError):
        _check_equivalence(model, batch, with_grads=False, bounds=bounds)


def test_dp_ranks_get_their_slabs_under_accelerate(tmp_path):
    """rank=r holds what accelerate's batch sharding of the interleaved dataset gives rank r."""
    from accelerate.data_loader import BatchSamplerShard
    from torch.utils.data import BatchSampler, SequentialSampler
    rng = np.random.default_rng(2)
    out, _ = write_pack(str(tmp_path), rng.integers(2, 200, 60), Alignment(capacity=256),
                        PackingConfig(dp=2))
    for batch in (1, 2):
        every = SlabDataset(out, world_size=2, per_device_batch=batch)
        assert sorted(set(every.order.tolist())) == list(range(len(every.index)))
        for r in range(2):
            mine = SlabDataset(out, rank=r, world_size=2)
            assert (mine.index.dp_rank[mine.order] == r).all()
            key = mine.index.step[mine.order] * 10**6 + mine.index.microbatch[mine.order]
            assert (np.diff(key) > 0).all()  # the plan's step order
            shard = BatchSamplerShard(BatchSampler(SequentialSampler(every), batch, False), 2, r)
            got = [int(every.order[i]) for b in shard for i in b]
            # exact: the plan's own slabs, then (B not dividing them) its own first again (S46B-7)
            assert got == SlabDataset(out, rank=r, world_size=2, per_device_batch=batch).order.tolist()
            assert got[:len(mine)] == mine.order.tolist() and set(got) == set(mine.order.tolist())
    with pytest.raises(PacktoolInputError, match="dp=2"):
        SlabDataset(out, rank=0, world_size=4)
    # without a DP plan: round robin
    idx = SlabDataset(out, world_size=2).index
    assert dp_order(idx, 1, 3, 1).tolist() == list(range(1, len(idx), 3))


@pytest.fixture(scope="module")
def gsm8k_slabs(tmp_path_factory) -> str:
    from packtool.packing import pack
    from packtool.tokenize.config import TokenizeConfig
    tmp_path = tmp_path_factory.mktemp("gsm8k")
    out = str(tmp_path / "gsm8k")
    pack([GSM8K], Alignment(capacity=384), PackingConfig(), output=out,
         tokenize=TokenizeConfig(tokenizer=GPT2, prompt_field="question", response_field="answer"),
         cache_dir=str(tmp_path / "cache"), workers=1)
    return out


def _train_args(cls, tmp_path, **kw):
    import dataclasses
    if "train_sampling_strategy" in {f.name for f in dataclasses.fields(cls)}:
        kw["train_sampling_strategy"] = "sequential"  # keep the pack's order (transformers 5)
    return cls(output_dir=str(tmp_path / "run"), max_steps=3, per_device_train_batch_size=2,
               learning_rate=1e-3, logging_steps=1, save_strategy="no", report_to=[],
               use_cpu=True, remove_unused_columns=False, dataloader_num_workers=0, **kw)


@pytest.mark.parametrize("streaming", [False, True], ids=["Dataset", "IterableDataset"])
def test_sft_trainer_runs_on_packtool_slabs(tmp_path, gsm8k_slabs, streaming):
    trl = pytest.importorskip("trl", reason="trl is not installed (the `test` extra has it)")
    from transformers import PreTrainedTokenizerFast
    out = gsm8k_slabs
    slabs = SlabDataset(out)
    ds = slabs.to_hf(streaming=streaming, **({} if streaming else {"cache_dir": str(tmp_path / "hf")}))
    first = next(iter(ds))
    assert all(np.array_equal(first[k], slabs[0][k]) for k in slabs[0])  # same order, same slabs
    tok = PreTrainedTokenizerFast(tokenizer_file=GPT2, pad_token="<|endoftext|>")
    model = tiny_llama("sdpa", vocab=len(tok))
    args = _train_args(trl.SFTConfig, tmp_path, dataset_kwargs={"skip_prepare_dataset": True},
                       max_length=None)
    trainer = trl.SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok,
                             data_collator=SlabCollator())
    batch = next(iter(trainer.get_train_dataloader()))
    assert batch["input_ids"].shape[0] == 1 and "attention_mask" not in batch
    res = trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert res.global_step == 3 and len(losses) == 3 and np.isfinite(losses).all()
    assert losses[0] == pytest.approx(np.log(len(tok)), rel=0.05)  # random init: ~uniform


def test_plain_trainer_on_slabs_and_on_the_plain_parquet_output(tmp_path, gsm8k_slabs):
    """Trainer on SlabDataset; the output read as a `datasets` Parquet dataset (no packtool
    reader) collates to the same batches."""
    datasets = pytest.importorskip("datasets")
    from transformers import Trainer
    out = gsm8k_slabs
    ours = SlabDataset(out)
    hf = datasets.load_dataset("parquet", data_dir=out, cache_dir=str(tmp_path / "hf"))["train"]
    assert len(hf) == len(ours)
    want = SlabCollator()([ours[0], ours[1]])
    got = SlabCollator()([hf[0], hf[1]])
    assert all(torch.equal(want[k], got[k]) for k in ("input_ids", "labels", "position_ids"))
    trainer = Trainer(model=tiny_llama("eager", vocab=50257), args=_train_args(
        transformers.TrainingArguments, tmp_path), train_dataset=ours, data_collator=SlabCollator())
    res = trainer.train()
    assert res.global_step == 3 and np.isfinite(res.training_loss)


@pytest.fixture(scope="module")
def side_slabs(tmp_path_factory):
    """Slabs with side columns (scalar float32 / float64 with its own fill, 4-wide int32
    support), pads inside, after and as fill segments; written from FORMAT.md by the helper."""
    from megatron_slabs import greedy_bins, random_sequences, random_side, write_slab_dir
    seqs = random_sequences(20, 2, 40, seed=5)
    side = random_side(seqs, seed=5)
    align = Alignment(tp=2, cp=2, capacity=128, fixed_length=128)
    bins = greedy_bins(seqs, align)
    return seqs, side, bins, write_slab_dir(str(tmp_path_factory.mktemp("hfside") / "s"), seqs, bins, align,
                                            side=side)


@pytest.mark.parametrize("keep_pads", [False, True])
def test_side_columns_are_batch_keys_as_stored_and_label_shifted(side_slabs, keep_pads):
    from megatron_slabs import logprob_of
    seqs, side, bins, path = side_slabs
    ds = SlabDataset(path)
    assert [c.name for c in ds.side_columns] == ["old_logprobs", "returns", "support"]
    feats = [ds[i] for i in range(4)]
    b = SlabCollator(keep_pads=keep_pads, side_columns=ds.side_columns)(feats)
    ids, labels = b["input_ids"][0].numpy(), b["labels"][0].numpy()
    for c, _ in side:
        assert b[c.name].shape[:2] == b[f"shift_{c.name}"].shape[:2] == (1, ids.size)
        assert b[c.name].dtype == b[f"shift_{c.name}"].dtype == getattr(torch, c.dtype)
    # as stored: each position's own token; shifted: the token the logits there predict
    real = ids != ds.manifest.pad_id
    assert np.array_equal(b["old_logprobs"][0].numpy()[real], logprob_of(ids[real]))
    trained = np.flatnonzero(labels[1:] != IGNORE_INDEX)  # logits at p predict labels[p+1]
    assert trained.size and np.array_equal(b["shift_old_logprobs"][0].numpy()[trained],
                                           logprob_of(ids[trained + 1]))
    sup = b["shift_support"][0].numpy()[trained]
    assert ((sup == ids[trained + 1, None]).sum(1) == 1).all()
    # every segment's last position holds the fill: no value crosses a segment boundary
    ends = [e - 1 for _, e in segments(b)]
    assert (b["shift_returns"][0, ends] == 0.0).all() and (b["shift_support"][0, ends] == -1).all()
    if not keep_pads:  # pads dropped like labels: exactly each sequence's own values
        order = [i for f in range(4) for i in bins[int(ds.order[f])]]
        want = np.concatenate([side[1][1][i] for i in order])
        assert np.array_equal(b["returns"][0].numpy(), want)
        want_shift = np.concatenate([np.append(side[1][1][i][1:], 0.0) for i in order])
        assert np.array_equal(b["shift_returns"][0].numpy(), want_shift)


def test_side_columns_through_datasets_rows_and_name_collisions(side_slabs):
    """Raw rows from `datasets` (K-wide rows as nested lists) give the same batch; a side
    column that would overwrite a batch key is refused in one line."""
    pytest.importorskip("datasets", reason="datasets is not installed (the `test` extra has it)")
    _, _, _, path = side_slabs
    ds = SlabDataset(path)
    col = SlabCollator(side_columns=ds.side_columns)
    hf = ds.to_hf()
    a, b = col([ds[i] for i in range(3)]), col([hf[i] for i in range(3)])
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], torch.Tensor):
            assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k
        else:
            assert a[k] == b[k], k
    with pytest.raises(PacktoolConfigError, match="would overwrite the batch key 'shift_old_logprobs'"):
        SlabCollator(side_columns=["old_logprobs", "shift_old_logprobs"])  # at the call (S35-3)
    with pytest.raises(PacktoolInputError, match="a slab has no side column 'advantages'"):
        SlabCollator(side_columns=["advantages"])([ds[0]])


def test_a_dataset_that_was_read_still_pickles_for_spawned_workers(slabs):
    """A peek at one slab opens a Parquet reader; spawn/forkserver DataLoader workers and
    to_hf(streaming=True) pickle the dataset, reader and all."""
    import pickle

    from torch.utils.data import DataLoader
    ds = SlabDataset(slabs)
    first = ds[0]
    again = pickle.loads(pickle.dumps(ds))
    assert np.array_equal(again[0]["input_ids"], first["input_ids"]) and ds._reader is not None
    dl = DataLoader(ds, batch_size=None, num_workers=1, multiprocessing_context="spawn")
    assert np.array_equal(np.asarray(next(iter(dl))["input_ids"]), first["input_ids"])
    from packtool.megatron.dataset import PackedSlabDataset
    mds = PackedSlabDataset(slabs)
    got = mds.load([0])
    assert torch.equal(pickle.loads(pickle.dumps(mds)).load([0]).input_ids, got.input_ids)
