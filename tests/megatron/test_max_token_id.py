"""Issue 23 class 7 (a pre-tokenized pack made without --tokenizer cannot be trained) and class 2
(consumers check what they read): each shard entry of the manifest records its largest token id
(`max_token_id`). A trainer refuses an output whose largest id is not below its vocabulary at
start, before the model is built, not mid-run when the reader meets the id; every reader holds
each row group's ids to the shard's recorded max (a manifest that lies is refused at the group);
the manifest check refuses a recorded max out of range; an output written before the field is
read as before."""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("torch")
typer = pytest.importorskip("typer")
from typer.testing import CliRunner  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.errors import PacktoolConfigError, PacktoolError  # noqa: E402
from packtool.slabs.format import MANIFEST, FormatError, SlabManifest  # noqa: E402

TOP = 900  # the largest id of the rows below: one row holds it
ROWS = [list(range(1 + k, 40 + k)) for k in range(0, 600, 7)] + [[5, TOP, 7, 8]]


@pytest.fixture(scope="module")
def ids_only(tmp_path_factory):
    """A pack of token ids made without --tokenizer (`packtool.pack` on an input_ids table, as
    `packtool pack` on a Parquet of ids): several shards and row groups."""
    import packtool
    root = tmp_path_factory.mktemp("maxid")
    out = str(root / "packed")
    packtool.pack(pa.table({"input_ids": ROWS}), alignment=Alignment(capacity=128), output=out,
                  cache_dir=str(root / "cache"), shard_tokens=1024)
    return out


def _manifest(out):
    with open(os.path.join(out, MANIFEST)) as f:
        return json.load(f)


def _copy(out, tmp_path, edit):
    dst = str(tmp_path / "copy")
    shutil.copytree(out, dst)
    m = _manifest(dst)
    edit(m)
    with open(os.path.join(dst, MANIFEST), "w") as f:
        json.dump(m, f)
    return dst


def test_a_pack_without_tokenizer_records_each_shards_max(ids_only):
    m = _manifest(ids_only)
    assert m["tokenizer"] == {} and len(m["shards"]) >= 2
    for s in m["shards"]:
        ids = pq.read_table(os.path.join(ids_only, s["file"]), columns=["input_ids"]).column("input_ids")
        assert s["max_token_id"] == int(np.concatenate(ids.to_pylist()).max()), s
    assert SlabManifest.read(ids_only).max_token_id == TOP


def _no_model(monkeypatch):
    import packtool.megatron.loop as loop

    def built(*a, **k):
        raise AssertionError("the model was built before the ids were checked")
    monkeypatch.setattr(loop, "build_gpt", built)


def _shape(vocab):
    from packtool.megatron.model import GPTShape
    return GPTShape(layers=1, hidden=32, heads=2, ffn=64, vocab=vocab, max_seq=128)


def _train(out, vocab, **cfg):
    """One step over every slab (grad_accum over the epoch): it reads every row group."""
    from packtool.megatron.loop import TrainConfig, train
    train(TrainConfig(data_dir=out, shape=_shape(vocab), steps=1, quiet=True, grad_accum=1000,
                      micro_batch_tokens=1024, **cfg))


def _cli(out, vocab):
    from packtool.cli.failure import guarded
    from packtool.megatron.train_cli import train_command
    app = typer.Typer()
    app.command("train")(guarded(train_command))
    app.command("noop")(lambda: None)
    r = CliRunner().invoke(app, ["train", out, "--device", "cpu", "--steps", "1", "--layers", "1", "--hidden", "32",
                                 "--heads", "2", "--ffn", "64", "--vocab-size", str(vocab)])
    if r.exit_code:
        errors = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
        assert r.exit_code == 2 and len(errors) == 1 and "Traceback" not in r.output, r.output
        raise PacktoolConfigError(errors[0])


def _dataset(out, vocab, **bound):
    from packtool.megatron.dataset import PackedSlabDataset, check_token_ids
    ds = PackedSlabDataset(out, grad_accum=2)
    check_token_ids(ds, bound.pop("model", vocab), bound.pop("vocab_size", None), "the checkpoint ck", **bound)


# every start that holds the ids to a vocabulary: (run it with bound `v`, what the refusal says)
STARTS = {
    "train, the model's vocabulary": (lambda o, v: _train(o, v), "the vocabulary {v} of the model shape"),
    "train, vocab_size": (lambda o, v: _train(o, 4096, vocab_size=v), "vocab_size={v}"),
    "train CLI, --vocab-size": (_cli, "--vocab-size {v}"),
    "dataset, the model's vocabulary": (lambda o, v: _dataset(o, v), "the vocabulary {v} of the checkpoint ck"),
    "dataset, a resume's recorded vocabulary": (lambda o, v: _dataset(o, v, model=4096, trained=v),
                                                "the vocabulary {v} that the checkpoint ck was trained on"),
}


@pytest.mark.parametrize("start", list(STARTS))
def test_an_id_over_the_vocabulary_is_refused_before_the_model(ids_only, start, monkeypatch):
    """Refused from the manifest before the model is built (its builder fails if called) and
    before any row group is decoded."""
    from read_counts import count_decodes
    run, said = STARTS[start]
    _no_model(monkeypatch)
    seen = count_decodes(monkeypatch)
    with pytest.raises(PacktoolConfigError) as e:
        run(ids_only, TOP)
    msg = str(e.value)
    assert "\n" not in msg and f"token id {TOP} " in msg and "max_token_id" in msg, msg
    assert said.format(v=TOP) in msg, msg
    assert "as the manifest records it" in msg and "`packtool verify` fails a record above" in msg, msg  # S46B-1
    assert not seen.get("input_ids"), dict(seen)


def _lowered(out, tmp_path):
    """The output with its largest shard's max_token_id lowered by one: (copy, shard, row group of TOP)."""
    m = _manifest(out)
    k = max(range(len(m["shards"])), key=lambda i: m["shards"][i]["max_token_id"])
    shard = m["shards"][k]["file"]
    pf = pq.ParquetFile(os.path.join(out, shard))
    group = next(g for g in range(pf.num_row_groups)
                 if TOP in np.concatenate(pf.read_row_group(g, columns=["input_ids"]).column(0).to_pylist()))

    def edit(m):
        m["shards"][k]["max_token_id"] = TOP - 1
    return _copy(out, tmp_path, edit), shard, group


def _hf(out):
    from packtool.hf import SlabDataset
    ds = SlabDataset(out)
    return [ds[i] for i in range(len(ds))]


def _rows(out):
    from packtool.slabs.reader import SlabIndex, SlabReader
    sm = SlabManifest.read(out)
    r = SlabReader(sm, SlabIndex.build(sm))
    return [r.row(i) for i in range(len(r.index))]


def _inspect(out):
    from packtool.slabs.reader import check_rows
    return check_rows(SlabManifest.read(out))


def _steps(out):
    from packtool.megatron.dataset import PackedSlabDataset
    ds = PackedSlabDataset(out, grad_accum=2)
    return list(ds.steps(max_steps=ds.steps_per_epoch()))


READERS = {"SlabReader.row": _rows, "check_rows (inspect)": _inspect, "megatron dataset": _steps, "hf": _hf,
           "train": lambda o: _train(o, 4096)}


@pytest.mark.parametrize("reader", list(READERS))
def test_a_lowered_max_is_refused_at_its_group(ids_only, tmp_path, reader):
    out, shard, group = _lowered(ids_only, tmp_path)
    with pytest.raises(FormatError) as e:
        READERS[reader](out)
    msg = str(e.value)
    assert "\n" not in msg and f"{shard} row group {group} row " in msg, msg
    assert f"token id {TOP} is above the shard's max_token_id {TOP - 1}" in msg, msg


BAD = {"negative": -1, "2^31": 1 << 31, "a bool": True, "a string": "5", "null": None}


@pytest.mark.parametrize("value", list(BAD))
def test_a_recorded_max_out_of_range_is_refused_at_open(ids_only, tmp_path, value):
    def edit(m):
        m["shards"][0]["max_token_id"] = BAD[value]
    with pytest.raises(FormatError, match=r"shards\[0\]\.max_token_id is .*not a token id in \[0, 2\^31\)"):
        SlabManifest.read(_copy(ids_only, tmp_path, edit))


def test_a_recorded_max_at_vocab_size_is_refused_at_open(ids_only, tmp_path):
    def edit(m):
        m["tokenizer"] = {"pad_id": 0, "bos_id": None, "eos_id": None, "vocab_size": TOP}
    with pytest.raises(FormatError, match=r"max_token_id is 900, not a token id in \[0, 900\) \(tokenizer.vocab_size\)"):
        SlabManifest.read(_copy(ids_only, tmp_path, edit))


def test_an_output_without_the_field_is_read_as_before(ids_only, tmp_path):
    """An output of older packtool: no max recorded, trained as before; an id over the bound is
    then refused mid-run, at its group (tests/megatron/test_token_bound.py)."""
    def edit(m):
        for s in m["shards"]:
            del s["max_token_id"]
    out = _copy(ids_only, tmp_path, edit)
    assert SlabManifest.read(out).max_token_id is None
    _train(out, TOP + 1)
    assert len(_steps(out)) and len(_hf(out))
    with pytest.raises(PacktoolError, match=f"row group .* token id {TOP} is not below"):
        _train(out, TOP)


def test_verify_reports_what_every_reader_refuses(ids_only, tmp_path):
    """verify holds each shard's ids to its recorded max too: an output it passes is one every
    reader reads (and the untouched output passes)."""
    from packtool.verification import verify
    out, shard, _ = _lowered(ids_only, tmp_path)
    bad = [p for p in verify(out, workers=1, progress=False).problems if p.check == "token_id_range"]
    assert len(bad) == 1 and bad[0].shard == shard and bad[0].found == TOP and bad[0].expected == TOP - 1, bad
    assert f"above the shard's recorded largest id {TOP - 1}" in bad[0].message
    assert verify(ids_only, workers=1, progress=False).ok
