"""`pack` end to end on the bundled real fixtures: every input shape, several layouts,
tokens equal to a direct `tokenizers` encoding, determinism, errors and interruption."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import ALPACA, GPT2, GSM8K, MISTRAL_DIR, PEPS, SHAREGPT, TASKMASTER
from tokenizers import Tokenizer
from typer.testing import CliRunner

import packtool.packing as pack_mod
from packtool.align import Alignment
from packtool.cli.app import app
from packtool.layout import cp_rank_index
from packtool.packing import OutputExistsError, pack
from packtool.planning.core import PackingConfig
from packtool.slabs.names import MANIFEST
from packtool.tokenize.config import TokenizeConfig
from packtool.verification.run import source_store, verify

runner = CliRunner()


def _rows(out: str) -> pa.Table:
    man = json.load(open(os.path.join(out, MANIFEST)))
    return pa.concat_tables([pq.read_table(os.path.join(out, s["file"])) for s in man["shards"]])


def _reassemble(table: pa.Table) -> dict[int, np.ndarray]:
    """source row -> its tokens, rebuilt from the slabs (split chunks joined by offset)."""
    pieces: dict[int, list] = {}
    for ids, cup, src, off, lens in zip(*(table.column(c).to_pylist() for c in
                                         ("input_ids", "cu_seqlens_padded", "source_index",
                                          "source_offset", "seq_lens"))):
        for k, s in enumerate(src):
            if s >= 0:
                pieces.setdefault(s, []).append((off[k], ids[cup[k]:cup[k] + lens[k]]))
    return {s: np.concatenate([np.asarray(t) for _, t in sorted(p)]) for s, p in pieces.items()}


SHAPES = [  # (inputs, tokenize config kwargs, shape name)
    ([PEPS], dict(tokenizer=GPT2), "text"),
    ([TASKMASTER], dict(tokenizer=MISTRAL_DIR, chat_template="mistral"), "chat"),
    ([SHAREGPT], dict(tokenizer=GPT2, chat_template="chatml"), "sharegpt"),
    ([ALPACA], dict(tokenizer=MISTRAL_DIR, chat_template="mistral"), "alpaca"),
    ([GSM8K], dict(tokenizer=MISTRAL_DIR, prompt_field="question", response_field="answer"), "fields"),
]


@pytest.mark.parametrize("inputs,tok,shape", SHAPES, ids=[s[2] for s in SHAPES])
def test_every_shape_packs_and_verifies_against_its_source(tmp_path, inputs, tok, shape):
    cfg = TokenizeConfig(**tok)
    align = Alignment(tp=2, cp=2, fp8="blockwise", capacity=2048)
    out = str(tmp_path / "out")
    res = pack(inputs, align, PackingConfig("mffd", overflow="split"), cfg, output=out,
               cache_dir=str(tmp_path / "c"))
    src, fp = source_store(inputs, cfg, cache_dir=str(tmp_path / "c"))
    rep = verify(out, source_dir=src, source_fingerprint=fp)
    assert rep.ok, [p.message for p in rep.problems]
    rows = _reassemble(_rows(out))
    assert sorted(rows) == list(range(res.plan.num_sequences))  # every row exactly once
    assert res.loss_tokens > 0


def _tokens_shape_input(tmp_path) -> str:
    """Pre-tokenized input: ids and labels (-100 = no loss) in Parquet."""
    rng = np.random.default_rng(0)
    lens = rng.integers(3, 700, 60)
    ids = [rng.integers(5, 50000, n).astype(np.int32) for n in lens]
    labels = [np.where(np.arange(n) < n // 2, -100, x) for n, x in zip(lens, ids)]
    path = str(tmp_path / "tok.parquet")
    pq.write_table(pa.table({"input_ids": ids, "labels": labels}), path)
    return path, ids, labels


def test_pretokenized_input_keeps_ids_and_masks(tmp_path):
    path, ids, labels = _tokens_shape_input(tmp_path)
    out = str(tmp_path / "out")
    pack([path], Alignment(cp=2, capacity=512), PackingConfig("bfd", overflow="split"),
         TokenizeConfig(tokenizer=GPT2, add_bos=False, add_eos=False), output=out,
         cache_dir=str(tmp_path / "c"))
    t = _rows(out)
    got = _reassemble(t)
    for i, x in enumerate(ids):
        assert np.array_equal(got[i], x)
    # loss lands on labelled tokens only, never on a segment's first token
    for m, cup, lens, src, off in zip(*(t.column(c).to_pylist() for c in
                                       ("loss_mask", "cu_seqlens_padded", "seq_lens", "source_index", "source_offset"))):
        for k, s in enumerate(src):
            if s < 0:
                continue
            seg = np.asarray(m[cup[k]:cup[k] + lens[k]])
            want = (np.asarray(labels[s][off[k]:off[k] + lens[k]]) != -100).astype(np.uint8)
            want[0] = 0
            assert np.array_equal(seg, want)


def test_text_tokens_equal_a_direct_tokenizers_encoding(tmp_path):
    out = str(tmp_path / "out")
    res = pack([PEPS], Alignment(capacity=4096), PackingConfig("bfd", overflow="split"),
               TokenizeConfig(tokenizer=GPT2), output=out, cache_dir=str(tmp_path / "c"))
    tok = Tokenizer.from_file(GPT2)
    texts = [json.loads(line)["text"] for line in __import__("gzip").open(PEPS, "rt")]
    got = _reassemble(_rows(out))
    info = json.load(open(os.path.join(out, MANIFEST)))["tokenizer"]
    for i, text in enumerate(texts):
        direct = tok.encode(text, add_special_tokens=False).ids
        seq = got[i].tolist()
        if info["bos_id"] is not None and seq[:1] == [info["bos_id"]] and direct[:1] != seq[:1]:
            seq = seq[1:]
        if info["eos_id"] is not None and seq[-1:] == [info["eos_id"]]:
            seq = seq[:-1]
        assert seq == direct
    assert res.plan.overflow.sequences > 0  # PEPs are long: split was exercised


@pytest.mark.parametrize("align", [
    Alignment(), Alignment(tp=4, fp8="mxfp8", capacity=4096), Alignment(cp=4, fp8="tensorwise", capacity=3000),
    Alignment(tp=2, cp=2, fp8="blockwise", capacity=4096, fixed_length=4096),
    Alignment(tp=2, cp=2, convention="verl", fp8="blockwise", capacity=4096),
], ids=["plain", "tp4-mxfp8", "cp4-tensorwise", "fixed", "verl"])
def test_layouts_verify(tmp_path, align):
    out = str(tmp_path / "out")
    pack([GSM8K, TASKMASTER], align, PackingConfig("balanced", overflow="split", dp=2),
         TokenizeConfig(tokenizer=MISTRAL_DIR, chat_template="mistral", prompt_field="question",
                        response_field="answer"), output=out, cache_dir=str(tmp_path / "c"))
    rep = verify(out)
    assert rep.ok, [p.message for p in rep.problems]
    t = _rows(out)
    lens = np.array([len(x) for x in t.column("input_ids").to_pylist()])
    if align.fixed_length:
        assert (lens == align.fixed_length).all()
    fill = t.column("fill_pad").to_numpy()
    assert ((lens - fill) % align.t == 0).all()


def test_same_input_and_config_give_identical_bytes(tmp_path):
    cfg = TokenizeConfig(tokenizer=MISTRAL_DIR, chat_template="mistral")
    outs = []
    for k in range(2):
        out = str(tmp_path / f"o{k}")
        pack([TASKMASTER], Alignment(cp=2, capacity=2048), PackingConfig(seed=7), cfg,
             output=out, cache_dir=str(tmp_path / f"c{k}"), shard_tokens=100_000)
        outs.append(out)
    files = sorted(os.listdir(outs[0]))
    assert len(files) > 2 and files == sorted(os.listdir(outs[1]))
    for f in files:
        assert open(os.path.join(outs[0], f), "rb").read() == open(os.path.join(outs[1], f), "rb").read(), f


def test_existing_output_needs_overwrite_and_interrupt_keeps_previous(tmp_path, monkeypatch):
    cfg = TokenizeConfig(tokenizer=GPT2)
    out = str(tmp_path / "out")
    args = ([PEPS], Alignment(capacity=8192), PackingConfig("bfd", overflow="split"), cfg)
    pack(*args, output=out, cache_dir=str(tmp_path / "c"))
    before = {f: open(os.path.join(out, f), "rb").read() for f in os.listdir(out)}
    with pytest.raises(OutputExistsError, match="overwrite=True"):
        pack(*args, output=out, cache_dir=str(tmp_path / "c"))

    def interrupted(*a, **k):  # Ctrl-C arrives while the new output is being finished
        raise KeyboardInterrupt
    monkeypatch.setattr(pack_mod, "write_manifest", interrupted)
    with pytest.raises(KeyboardInterrupt):
        pack([PEPS], Alignment(capacity=4096), PackingConfig("bfd", overflow="split"), cfg,
             output=out, overwrite=True, cache_dir=str(tmp_path / "c"))
    after = {f: open(os.path.join(out, f), "rb").read() for f in os.listdir(out)}
    assert after == before
    assert [d for d in os.listdir(tmp_path) if "packtool-tmp" in d] == []


def test_sigint_during_a_real_pack_leaves_previous_output(tmp_path):
    out = tmp_path / "out"
    base = [sys.executable, "-m", "packtool.cli", "pack", PEPS, TASKMASTER, GSM8K,
            "--tokenizer", MISTRAL_DIR, "--chat-template", "mistral", "--prompt-field", "question",
            "--response-field", "answer", "--overflow", "split", "--no-progress",
            "--output", str(out), "--cache-dir", str(tmp_path / "c")]
    assert subprocess.run(base, capture_output=True).returncode == 0
    before = {f: (out / f).read_bytes() for f in os.listdir(out)}
    import signal
    import time
    p = subprocess.Popen(base + ["--overwrite", "--max-tokens", "1024", "--cache-dir", str(tmp_path / "c2")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(1.5)  # interpreter start + imports; the pack itself is still running or done
    p.send_signal(signal.SIGINT)
    p.wait(60)
    after = {f: (out / f).read_bytes() for f in os.listdir(out)}
    # the interrupt landed before the swap (old output intact) or after it (new output whole);
    # never a missing or half-written output
    assert MANIFEST in after
    assert after == before or verify(str(out)).ok
    assert not [d for d in os.listdir(tmp_path) if "packtool-tmp" in d]


@pytest.mark.parametrize("extra,pattern", [
    (["--max-tokens", "20", "--tp", "2", "--cp", "2", "--fp8", "blockwise"], r"--max-tokens 20 is below the packed multiple t=32"),
    (["--algorithm", "ffd", "--max-tokens", "1024"], r"peps_long5.jsonl.gz, row \d+: \d+ tokens; aligned footprint \d+ exceeds capacity 1024.*--overflow"),
    (["--tokenizer", "/nonexistent/tok.json"], r"tokenizer"),
])
def test_cli_errors_are_one_line_and_write_nothing(tmp_path, extra, pattern):
    out = tmp_path / "out"
    args = ["pack", PEPS, "--tokenizer", GPT2, "--output", str(out), "--cache-dir", str(tmp_path / "c"),
            "--no-progress", *extra]
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    assert re.search(pattern, " ".join(r.output.split())), r.output
    assert not out.exists()


def test_cli_missing_input_and_existing_output(tmp_path):
    r = runner.invoke(app, ["pack", str(tmp_path / "nope.jsonl"), "--tokenizer", GPT2, "--output", str(tmp_path / "o")])
    assert r.exit_code == 2 and "nope.jsonl" in r.output
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "notes.txt").write_text("mine")  # an empty folder is fine; a foreign file is not
    r = runner.invoke(app, ["pack", PEPS, "--tokenizer", GPT2, "--output", str(tmp_path / "o")])
    assert r.exit_code == 2 and "notes.txt" in r.output


def test_dry_run_prints_plan_and_writes_nothing(tmp_path):
    r = runner.invoke(app, ["pack", PEPS, "--tokenizer", GPT2, "--overflow", "split", "--dry-run",
                            "--json", "--cache-dir", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["output"] is None and d["slabs"] >= d["lower_bound"] > 0


def test_format_md_reader_example_runs(tmp_path):
    """The standalone reader in FORMAT.md slices a slab for each CP rank like layout does."""
    from slab_support import run_format_reader
    out = str(tmp_path / "out")
    pack([GSM8K], Alignment(tp=2, cp=2, fp8="blockwise", capacity=2048), PackingConfig(),
         TokenizeConfig(tokenizer=MISTRAL_DIR, prompt_field="question", response_field="answer"),
         output=out, cache_dir=str(tmp_path / "c"))
    row = _rows(out).slice(0, 1).to_pylist()[0]
    cup = np.asarray(row["cu_seqlens_padded"])
    for r in range(2):
        res = run_format_reader(out, tmp_path, rank=r, check=True)
        n, loss, cu_local = res.stdout.split(" ", 2)
        idx = cp_rank_index(cup[:-1], np.diff(cup), 2, r)
        assert int(n) == idx.size
        assert int(loss) == int(np.asarray(row["loss_mask"])[idx].sum())
        assert json.loads(cu_local) == (cup // 2).tolist()


def test_verify_source_reuses_the_recorded_tokenization(tmp_path):
    """`verify --source` with no tokenization flags re-tokenizes as the manifest recorded."""
    out = str(tmp_path / "out")
    pack([GSM8K, TASKMASTER], Alignment(cp=2, capacity=2048), PackingConfig("bfd", overflow="split"),
         TokenizeConfig(tokenizer=MISTRAL_DIR, chat_template="mistral", prompt_field="question",
                        response_field="answer"), output=out, cache_dir=str(tmp_path / "c"))
    r = runner.invoke(app, ["verify", out, "--source", GSM8K, "--source", TASKMASTER,
                            "--cache-dir", str(tmp_path / "c"), "--json"])
    assert r.exit_code == 0, r.output
    # a different template is a different tokenization: every chat row then differs
    r = runner.invoke(app, ["verify", out, "--source", GSM8K, "--source", TASKMASTER,
                            "--chat-template", "chatml", "--cache-dir", str(tmp_path / "c"), "--json"])
    assert r.exit_code == 1, r.output


def test_parallel_shard_writers_give_the_sequential_bytes(tmp_path, monkeypatch):
    import packtool.slabs.writer as writer
    cfg = TokenizeConfig(tokenizer=MISTRAL_DIR, chat_template="mistral")
    outs = []
    for k, cores in enumerate((2, 1)):
        monkeypatch.setattr(writer.os, "cpu_count", lambda c=cores: c)
        out = str(tmp_path / f"o{k}")
        res = pack([TASKMASTER], Alignment(cp=2, capacity=2048), PackingConfig(seed=3), cfg,
                   output=out, cache_dir=str(tmp_path / "c"), shard_tokens=20_000)
        assert len(res.shards) > 2
        outs.append(out)
    for f in sorted(os.listdir(outs[0])):
        assert open(os.path.join(outs[0], f), "rb").read() == open(os.path.join(outs[1], f), "rb").read(), f
